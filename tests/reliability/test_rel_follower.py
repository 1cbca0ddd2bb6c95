"""A follower's watch outlives a PostgreSQL restart (issue 20 item 5), with the tests' own cluster.

Before: the first database error ended the follower's watch (an exception out of its task) and left
its ranks training unwatched. Now it keeps watching its own processes through the outage, reads the
row again once the server is back, and stops its ranks when node 0's attempt ends.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import Session

from core import jobs
from core.db import get_engine
from core.migrate import upgrade
from core.tables import JobStatus
from worker.launch import Launched

pytestmark = pytest.mark.postgres
S = JobStatus
NEVER_S = 60  # a join only fails the test instead of hanging it


def _wait(check: Any, what: str) -> None:
    deadline = time.monotonic() + NEVER_S
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_a_follower_watches_its_ranks_through_a_database_restart(api_settings, pg_cluster, tmp_path: Path) -> None:
    from worker.follower import _follow

    url = pg_cluster.url
    upgrade(url)
    settings = api_settings(database_url=url, poll_s=0.1, cancel_grace_s=5.0)
    engine = get_engine(url)
    with Session(engine) as s:
        job_id = jobs.create(s, "j", {"name": "j", "max_steps": 5, "device": "cpu"}, queue="rankzero").id
    assert job_id is not None
    assert jobs.claim(engine, job_id, settings.resolved_runs_dir, host="node0") is not None
    assert jobs.mark_running(engine, job_id, pid=1, detail="node 0 launched", attempt=1)
    mark = f"follower-test-{os.getpid()}"
    ranks = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                             env={**os.environ, "RANKZERO_JOB_MARK": mark})  # fmt: skip
    launched = Launched(ranks, mark, 0, tmp_path, tmp_path / "launcher.log")
    out: list[Any] = []
    errors: list[BaseException] = []

    def follow() -> None:
        try:
            out.append(_follow(engine, settings, job_id, 1, 1, launched))
        except BaseException as exc:
            errors.append(exc)

    watcher = threading.Thread(target=follow, daemon=True)
    try:
        watcher.start()
        pg_cluster.stop()  # the database restarts under the watch
        time.sleep(20 * settings.poll_s)  # several polls against a stopped server
        assert watcher.is_alive() and not errors, errors
        assert ranks.poll() is None  # the ranks train on, watched
        pg_cluster.start()
        # the job is cancelled once the server is back: the follower reads the row again and stops its ranks
        _wait(lambda: _try(lambda: _cancel(engine, job_id)), "the database to come back")
        watcher.join(NEVER_S)
        assert not watcher.is_alive() and not errors, errors
        assert ranks.poll() is not None and "stopped (cancelling" in out[0], out
    finally:
        if ranks.poll() is None:
            ranks.kill()
            ranks.wait()


def _cancel(engine: Any, job_id: int) -> bool:
    with Session(engine) as s:
        won = jobs.transition(s, job_id, S.cancelling, expect=S.running, detail="cancel requested")
        s.commit()
        return won


def _try(fn: Any) -> bool:
    try:
        return bool(fn())
    except Exception:
        return False
