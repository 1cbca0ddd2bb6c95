"""Data: the global-batch layout (which sample goes where), the data sets, and the loaders."""
