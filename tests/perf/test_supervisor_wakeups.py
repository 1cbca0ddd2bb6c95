"""A supervisor sleeps on events, not on a 0.25 s tick (worker/wakeups.py, issue 29 "the worker's CPU while a
job runs"): a wait is one select() until a deadline; its ranks' exit (a pidfd), a cancel (core/wake.py's
after-commit touch, made by the API's cancel route) and events.jsonl written (inotify) wake it; a trainer's
heartbeat touches do not; node 0's loop over an idle running job looks a bounded number of times, and a
cancel still stops it when the row's backstop read is an hour away. Mechanisms, not times."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from api.app import create_app
from core import jobs, wake
from core.db import get_engine
from core.migrate import upgrade
from core.tables import JobStatus
from worker import node_zero, wakeups
from worker.attempt import Seen, StopReason
from worker.wakeups import Cadence, Wakeups

S = JobStatus
NEVER_S = 60.0  # a missed wake-up would hold a wait this long: the tests below would then fail, not pass


def _sleeper(seconds: float = 600) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"], start_new_session=True)


@pytest.fixture
def running_job(api_settings) -> tuple[Any, Any, int]:
    """Settings, engine and a job that is `running` (attempt 1) on a SQLite database."""
    settings = api_settings()
    upgrade(settings.resolved_database_url)
    engine = get_engine(settings.resolved_database_url)
    with Session(engine) as s:
        job_id = jobs.create(s, "j", {"name": "j", "max_steps": 5, "device": "cpu"}, queue="rankzero").id
    assert job_id is not None
    assert jobs.claim(engine, job_id, settings.resolved_runs_dir, host="node0") is not None
    assert jobs.mark_running(engine, job_id, pid=1, detail="launched", attempt=1)
    return settings, engine, job_id


@pytest.fixture
def proc():
    p = _sleeper()
    yield p
    if p.poll() is None:
        p.kill()
        p.wait()


@pytest.mark.parametrize(
    ("commits", "files", "fallback", "row_s", "scan_s"),
    [
        (True, True, 0.25, wakeups.ROW_BACKSTOP_S, wakeups.SCAN_EVERY_S),  # SQLite on Linux: woken for both
        (False, True, 0.25, wakeups.ROW_EVERY_S, wakeups.SCAN_EVERY_S),  # PostgreSQL: the row is read every second
        (False, False, 0.25, wakeups.ROW_EVERY_S, wakeups.FILES_GAP_S),  # no inotify: files read every gap
        (False, False, 3.0, 3.0, 3.0),  # a longer poll_s stands
    ],
)
def test_the_cadence(commits: bool, files: bool, fallback: float, row_s: float, scan_s: float) -> None:
    cadence = Cadence.of(commits, files, fallback)
    assert (cadence.row_s, cadence.scan_s) == (row_s, scan_s)


def test_an_idle_wait_is_one_select_and_no_sleep(running_job, proc, monkeypatch: pytest.MonkeyPatch) -> None:
    _, engine, _ = running_job
    w = Wakeups(proc, engine, files=[Path(engine.url.database).parent / "events.jsonl"])
    assert w.pidfd is not None and w.commits is not None and w.files is not None, "no pidfd or inotify here"
    calls = []
    real = wakeups.select.select
    monkeypatch.setattr(wakeups.select, "select", lambda *a: calls.append(a) or real(*a))
    monkeypatch.setattr(wakeups.time, "sleep", lambda s: pytest.fail(f"the wait polled: time.sleep({s})"))
    try:
        assert w.wait(time.monotonic() + 0.3, files_from=0.0) == wakeups.Woken()
    finally:
        w.close()
    assert len(calls) == 1


def test_a_rank_exit_ends_the_wait(running_job) -> None:
    _, engine, _ = running_job
    quick = _sleeper(0.2)
    w = Wakeups(quick, engine)
    try:
        assert w.wait(time.monotonic() + NEVER_S, files_from=0.0).exited
    finally:
        w.close()
    assert quick.wait(NEVER_S) == 0


def test_a_cancel_through_the_api_wakes_a_waiting_supervisor(running_job, proc, auth_headers) -> None:
    settings, engine, job_id = running_job
    w = Wakeups(proc, engine)
    woken: list[wakeups.Woken] = []
    waiting = threading.Thread(target=lambda: woken.append(w.wait(time.monotonic() + NEVER_S, files_from=0.0)))
    try:
        with TestClient(create_app(settings), headers=auth_headers) as client:
            waiting.start()
            assert client.post(f"/api/jobs/{job_id}/cancel").status_code == 202
            waiting.join(NEVER_S)
    finally:
        w.close()
    assert woken and woken[0].row


def test_events_wake_it_no_sooner_than_asked_and_heartbeats_not_at_all(running_job, proc, tmp_path: Path) -> None:
    _, engine, _ = running_job
    run = tmp_path / "runs" / "job_1"  # not the database's folder, where a touch of any file is a commit's
    run.mkdir(parents=True)
    events, heartbeat = run / "events.jsonl", run / "heartbeat"
    heartbeat.touch()
    w = Wakeups(proc, engine, files=[events])
    try:
        os.utime(heartbeat)  # the trainer's beat: a sign of life read at the next look, never a wake-up
        assert w.wait(time.monotonic() + 0.3, files_from=0.0) == wakeups.Woken()
        events.write_text('{"seq": 1}\n')
        asked = time.monotonic() + 0.3
        assert w.wait(time.monotonic() + NEVER_S, files_from=asked).files
        assert time.monotonic() >= asked  # coalesced: the write waited for `files_from`
    finally:
        w.close()


class _IdleWatch:
    """node 0's Watcher as the loop sees it, over a real row: counts its looks and file reads."""

    def __init__(self, settings: Any, engine: Any, job_id: int, proc: subprocess.Popen[bytes]) -> None:
        spec, run = SimpleNamespace(stall_timeout_s=None), SimpleNamespace(events=settings.data_dir / "e")
        self.a = SimpleNamespace(proc=proc, mark=f"wakeups-test-{os.getpid()}", settings=settings, engine=engine,
                                 job_id=job_id, number=1, spec=spec, run=run)  # fmt: skip
        self.looks = self.rows = self.reads = 0
        self.status: JobStatus | None = S.running

    def read_events(self) -> None:
        self.reads += 1

    def due(self) -> float:
        return time.monotonic() + 3600  # no heartbeat or sample due in this test

    def look(self, now: float, read_row: bool = True) -> Seen:
        self.looks += 1
        if read_row:
            self.rows += 1
            self.status = jobs.live_view(self.a.engine, self.a.job_id)[0]
        return Seen(status=self.status, attempt=1)


def test_node_zero_looks_a_bounded_number_of_times_and_a_cancel_wakes_it(
    running_job, proc, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, engine, job_id = running_job
    monkeypatch.setattr(wakeups, "ROW_BACKSTOP_S", 3600.0)  # the row is read at once only when a commit wakes it
    watch = _IdleWatch(settings, engine, job_id, proc)
    ended: list[Any] = []
    began = time.monotonic()
    loop = threading.Thread(target=lambda: ended.append(node_zero._watch_until_ended(watch)))  # type: ignore[arg-type]
    loop.start()
    time.sleep(3.0)  # idle: nothing written, no commit
    idle_s, idle_looks, idle_rows = time.monotonic() - began, watch.looks, watch.rows
    with Session(engine) as s:  # what the API's cancel route does: the transition, then the touch
        assert jobs.transition(s, job_id, S.cancelling, expect=S.running, detail="cancel requested")
        s.commit()
    wake.after_commit(engine)
    loop.join(NEVER_S)
    assert not loop.is_alive(), "the cancel's wake-up was missed"
    assert ended[0].stopped_for is StopReason.cancel and proc.poll() is not None  # the ranks were stopped
    # The old loop looked every poll_s (0.25 s): 4 looks and 4 row reads a second. Now a look per scan.
    assert idle_rows == 1  # the first look; the next read was the cancel's
    assert idle_looks <= 1 + idle_s / wakeups.SCAN_EVERY_S + 1, (idle_looks, idle_s)
    assert watch.rows == 2
