"""The scheduler's tests: a live API and real Celery workers posing as hosts (`host-a`, `host-b`, each a
worker with RANKZERO_HOST_NAME and a few CPU rank slots) on this machine, running the real trainer
with the slowed-down MLP (tests/support/slow_model.py). The runs dir is shared, as multi-node needs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.support.jobs import USER_CODE, wait
from tests.support.services import DEFAULT_SETTINGS, ServiceOptions, Workers

FAST = {"RANKZERO_STALE_AFTER_S": "4", "RANKZERO_SCHEDULER_POLL_S": "0.2"}


@pytest.fixture
def service_options() -> ServiceOptions:
    return ServiceOptions(
        settings={**DEFAULT_SETTINGS, "cancel_grace_s": 10.0, "allowed_code": USER_CODE}, fake_trainer=False
    )


@pytest.fixture
def start_host(workers: Workers) -> Callable[..., Any]:
    """`start_host(settings, name, slots)`: a worker that registers as host `name` with `slots` CPU rank
    slots (threads pool, so several jobs at once); returns its process."""

    def start(settings: Any, name: str, slots: int, **extra: str) -> Any:
        env = {**FAST, "RANKZERO_HOST_NAME": name, "RANKZERO_CPU_SLOTS": str(slots), **extra}
        label = f"{name}-{len(workers.procs)}@%h"
        proc = workers.start(settings, pool="threads", concurrency=4, name=label, extra_env=env)
        wait(lambda: _registered_alive(settings, name), 60, f"{name} to register")
        return proc

    return start


def _registered_alive(settings: Any, name: str) -> bool:
    """True once host `name`'s row says alive and not draining (read from the database, as the API does)."""
    from core import hosts
    from core.db import get_engine

    try:
        rows = hosts.read_all(get_engine(settings.resolved_database_url), 4.0)
    except Exception:  # the worker has not migrated the database yet
        return False
    return any(h.name == name and h.alive and not h.draining for h in rows)
