"""rankzero's HTTP surface: routes, auth, request limits, pages. The shared core is `core/`."""
