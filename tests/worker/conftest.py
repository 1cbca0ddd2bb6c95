"""Fixtures for the worker tests (defined in wk_fixtures.py, shared with tests/cli)."""

from wk_fixtures import service, workers
