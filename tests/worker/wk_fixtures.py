"""Fixtures for the worker and CLI tests: real Celery workers as subprocesses (stopped by process group) and a
live API whose settings those workers share."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from wk_helpers import Client, Workers, run_pids


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Workers]:
    w = Workers(tmp_path)
    yield w
    for proc in w.procs:
        w.stop(proc, signal.SIGKILL)  # the worker's group
    # torchrun and ranks live in sessions of their own: find them by this test's token.
    for pid in run_pids(w.token):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def service(api_settings: Callable[..., Any], live_api: Callable[..., str]) -> Callable[..., tuple[Any, Client]]:
    """`service(**settings_overrides) -> (settings, client)`: a live API; start workers with `workers`."""

    def start(**overrides: Any) -> tuple[Any, Client]:
        overrides.setdefault("gpus", "")
        overrides.setdefault("cancel_grace_s", 5.0)
        overrides.setdefault("heartbeat_s", 1.0)
        settings = api_settings(**overrides)
        base = live_api(settings)
        return settings, Client(base, settings.token())

    return start
