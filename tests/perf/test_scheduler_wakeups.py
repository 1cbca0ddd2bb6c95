"""The scheduler's sleep between passes on SQLite (core/wake.py, issue 29 "idle ≤ 1 %"): it sleeps on
inotify, not on a stat() every 50 ms, yet a notify (a submit, a job's end) wakes it at once — also one
made while a pass ran, before the wait began."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from core import wake
from core.settings import Settings


@pytest.fixture
def waiter(tmp_path: Path) -> tuple[wake.Waiter, Settings]:
    values = {"data_dir": tmp_path / "data", "database_url": f"sqlite:///{tmp_path / 'rankzero.db'}"}
    settings = Settings(**values)
    w = wake.Waiter(settings)
    assert w._watch is not None, "no inotify on this Linux host: the waiter fell back to stat() polling"
    return w, settings


def test_an_idle_wait_neither_sleeps_in_steps_nor_stats(waiter, monkeypatch: pytest.MonkeyPatch) -> None:
    w, _ = waiter
    stats = []
    monkeypatch.setattr(wake.Waiter, "_mtime", lambda self: stats.append(1) or 0.0)
    monkeypatch.setattr(wake.time, "sleep", lambda s: pytest.fail(f"the wait polled: time.sleep({s})"))
    assert w.wait(0.3) is False
    assert stats == []


def test_a_notify_wakes_a_waiting_scheduler(waiter) -> None:
    w, settings = waiter
    timer = threading.Timer(0.2, wake.notify, args=(settings,))
    timer.start()
    try:
        assert w.wait(60.0) is True  # a missed wake-up would hold this for a minute and return False
    finally:
        timer.cancel()
    # One notify is a few inotify events (create, close, utime), read as they arrive: under load each may wake
    # one more, early, pass; but they are consumed, so with no new notify a wait soon sleeps out its time.
    early = 0
    while w.wait(0.2):
        early += 1
        assert early <= 3, "a single notify keeps waking the scheduler: its events are never consumed"


def test_a_notify_during_a_pass_makes_the_next_wait_return_at_once(waiter) -> None:
    w, settings = waiter
    wake.notify(settings)  # the file is created
    assert w.wait(60.0) is True
    wake.notify(settings)  # touched again (utime only): made while the scheduler was not waiting
    started = time.monotonic()
    assert w.wait(60.0) is True
    assert time.monotonic() - started < 30  # mechanism: not the timeout
