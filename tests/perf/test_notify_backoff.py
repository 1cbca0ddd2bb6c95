"""The notification sender of an idle worker (worker/notify_sender.py, issue 29 "idle ≤ 1 %"): it backs off
to a pass every IDLE_S while there is nothing to send, returns to one a second when there is, and a commit on
SQLite (core/wake.py's touch: a job's end) wakes it at once. Mechanisms, not times."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine

from core import wake
from worker import notify_sender
from worker.notify_sender import IDLE_S, POLL_S, next_wait_s

NEVER_S = 60.0


@pytest.mark.parametrize(
    ("waited", "worked", "then"),
    [
        (POLL_S, True, POLL_S),  # busy: every second
        (IDLE_S, True, POLL_S),  # work after a quiet spell: back to every second
        (POLL_S, False, 2 * POLL_S),  # quiet: twice as long each time
        (2 * POLL_S, False, 4 * POLL_S),
        (4 * POLL_S, False, IDLE_S),  # ... up to IDLE_S
        (IDLE_S, False, IDLE_S),
    ],
)
def test_the_wait_between_passes(waited: float, worked: bool, then: float) -> None:
    assert next_wait_s(waited, worked) == then


def test_a_commit_wakes_the_sleeping_sender_and_a_stop_ends_it(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'rankzero.db'}")
    (tmp_path / "rankzero.db").touch()
    commits = wake.commit_watch(engine)
    assert commits is not None, "no inotify on this Linux host"
    stop = threading.Event()
    try:
        timer = threading.Timer(0.2, wake.after_commit, args=(engine,))
        timer.start()
        assert notify_sender._sleep(stop, commits, NEVER_S) is False  # woken by the commit, not the minute
        started = time.monotonic()
        stop.set()
        assert notify_sender._sleep(stop, commits, NEVER_S) is True
        assert time.monotonic() - started < NEVER_S / 2  # mechanism: the stop, not the timeout
    finally:
        commits.close()
