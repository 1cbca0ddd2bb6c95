"""Fixtures for the team tests: a live API (and, where a test starts them, real workers posing as hosts
with the fake trainer), users added through the API, each with a client of her own token."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.support.jobs import wait
from tests.support.services import DEFAULT_SETTINGS, Client, ServiceOptions, Workers

FAST = {"RANKZERO_STALE_AFTER_S": "4", "RANKZERO_SCHEDULER_POLL_S": "0.2"}


@pytest.fixture
def service_options() -> ServiceOptions:
    return ServiceOptions(settings={**DEFAULT_SETTINGS, "cancel_grace_s": 5.0}, fake_trainer=True)


@pytest.fixture
def add_user() -> Callable[..., tuple[dict[str, Any], Client]]:
    """`add_user(admin_client, name, role, **quota)`: the user (as the API returned it) and a client with her token."""

    def add(admin: Client, name: str, role: str = "member", **quota: int) -> tuple[dict[str, Any], Client]:
        r = admin.http.post("/users", json={"name": name, "role": role})
        assert r.status_code == 201, r.text
        body = r.json()
        if quota:
            assert admin.http.patch(f"/users/{name}", json=quota).status_code == 200
        return body, Client(str(admin.http.base_url).removesuffix("/api/").removesuffix("/api"), body["token"]["token"])

    return add


@pytest.fixture
def start_host(workers: Workers) -> Callable[..., Any]:
    """`start_host(settings, name, slots)`: a worker registered as host `name` with `slots` CPU rank slots."""

    def start(settings: Any, name: str, slots: int) -> Any:
        env = {**FAST, "RANKZERO_HOST_NAME": name, "RANKZERO_CPU_SLOTS": str(slots)}
        proc = workers.start(settings, pool="threads", concurrency=4, name=f"{name}@%h", extra_env=env)
        wait(lambda: _alive(settings, name), 60, f"{name} to register")
        return proc

    return start


def _alive(settings: Any, name: str) -> bool:
    from core import hosts
    from core.db import get_engine

    try:
        rows = hosts.read_all(get_engine(settings.resolved_database_url), 4.0)
    except Exception:  # the worker has not migrated the database yet
        return False
    return any(h.name == name and h.alive and not h.draining for h in rows)
