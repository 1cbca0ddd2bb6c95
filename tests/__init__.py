"""The test suite (a package, so `tests.support` imports the same way from every folder)."""
