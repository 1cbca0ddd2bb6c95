"""Fixtures for the fault tests: a live API and real Celery workers running the real trainer under
torchrun (the worker tests' helpers, reused), plus servers of our own to break.

Every process a test starts is found again by its environment (rel_procs) and SIGKILLed at the
end, so a failing test never leaves ranks behind.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "worker"))  # wk_helpers: Workers, Client, settings_env

from rel_jobs import USER_CODE
from rel_procs import end_everything
from rel_servers import PgCluster, RedisServer
from wk_helpers import ROOT, Client, Workers


class RealWorkers(Workers):
    """Celery workers that launch the real trainer (`-m trainer`), with our user code importable."""

    def start(self, settings: Any, **kw: Any) -> Any:  # type: ignore[override]
        env = {"PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)]), **(kw.pop("extra_env", None) or {})}
        return super().start(settings, fake=False, extra_env=env, **kw)


@pytest.fixture
def service(
    api_settings: Callable[..., Any], live_api: Callable[..., str]
) -> Iterator[Callable[..., tuple[Any, Client]]]:
    """`service(**settings_overrides) -> (settings, client)`: a live API whose settings workers share."""
    started: list[Any] = []

    def start(**overrides: Any) -> tuple[Any, Client]:
        overrides.setdefault("gpus", "")
        overrides.setdefault("cancel_grace_s", 10.0)
        overrides.setdefault("heartbeat_s", 1.0)
        overrides.setdefault("allowed_code", USER_CODE)
        settings = api_settings(**overrides)
        started.append(settings)
        return settings, Client(live_api(settings), settings.token())

    yield start
    for settings in started:
        end_everything(settings.resolved_runs_dir)


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[RealWorkers]:
    import signal

    w = RealWorkers(tmp_path)
    yield w
    for proc in w.procs:
        w.stop(proc, signal.SIGKILL)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def pg_cluster() -> Iterator[PgCluster]:
    # Not under tmp_path: pytest's base temp dir is private to root and the server runs as `postgres`.
    workdir = Path(tempfile.mkdtemp(prefix="rankzero-pg-"))
    workdir.chmod(0o755)  # mkdtemp makes it private to root; the server's user must reach its cluster inside
    cluster = PgCluster(workdir / "cluster")
    try:
        cluster.init()
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)
