"""The `rankzero` command line: runs the parts, and talks REST to a running service."""
