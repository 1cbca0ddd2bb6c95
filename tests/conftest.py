"""The suite's shared fixtures live in tests/support (see its __init__ for the map); loaded here for every folder.

The tiers: `make test` runs everything; `make test-fast` runs `-m "not slow"`, the tests that start no
server, browser, worker or torchrun. A test is `slow` when it asks for a fixture that starts one
(`SERVICE_FIXTURES`, directly or through another fixture), carries a marker that needs one
(`SERVICE_MARKERS`), or is marked `slow` by hand (a test that launches processes itself).
"""

from __future__ import annotations

import pytest

pytest_plugins = [
    "tests.support.databases",
    "tests.support.settings",
    "tests.support.services",
    "tests.support.servers",
    "tests.support.browser",
]

# Fixtures of tests/support that start a process or need a server: the API, Celery workers, `rankzero up`,
# Redis / PostgreSQL servers of a test's own, a database on the shared PostgreSQL, chromium.
SERVICE_FIXTURES = frozenset({
    "live_api", "workers", "service", "web_service", "redis_server", "pg_cluster", "pg_url",
    "browser", "new_page", "page",
})  # fmt: skip
SERVICE_MARKERS = frozenset({"postgres", "redis", "browser"})


def is_slow(fixture_names: set[str], marker_names: set[str]) -> bool:
    """Whether a test belongs to the slow tier, from the fixtures it uses and the markers it carries."""
    return bool(fixture_names & SERVICE_FIXTURES or marker_names & (SERVICE_MARKERS | {"slow"}))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        markers = {mark.name for mark in item.iter_markers()}
        if is_slow(fixtures, markers) and "slow" not in markers:
            item.add_marker(pytest.mark.slow)
