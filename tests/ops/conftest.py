"""Fixtures of the operations tests (issue 25): the API fixtures of tests/api (an app on each database)."""

from tests.api.conftest import client, db, make_job, settings  # noqa: F401  (fixtures)
