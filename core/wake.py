"""Waking the scheduler: a submit, a requeue or a finished job makes it run a pass now, not at its next tick.

The job writer (core/jobs.py) wakes it after committing such a change (`after_commit`); a node's task
(worker/tasks.py) and a priority change (api/routes/priority.py) call `notify`.

PostgreSQL: `NOTIFY rankzero_scheduler` (the leader LISTENs on its own connection). SQLite, whose
API and workers share one machine: a touch of a file beside the database, which the waiting scheduler
sleeps on with inotify (core/kombu_compat.py's BrokerWatch; a stat() every 50 ms cost an idle worker
~0.5 % of a core in wake-ups) and, without inotify, stat()s every FILE_CHECK_S. Either way a lost
wake-up only costs one `scheduler_poll_s`: the scheduler still ticks.
"""

from __future__ import annotations

import logging
import os
import time
import weakref
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Engine

from core import kombu_compat
from core.db import get_engine
from core.settings import Settings

log = logging.getLogger("rankzero.scheduler")
CHANNEL = "rankzero_scheduler"
FILE_CHECK_S = 0.05


def _wake_file(settings: Settings) -> Path:
    url = settings.resolved_database_url
    if url.startswith("sqlite:///"):
        return _sqlite_wake_file(url.removeprefix("sqlite:///"))
    return settings.resolved_runs_dir / ".scheduler.wake"


def _sqlite_wake_file(database: str) -> Path:
    return Path(database + ".wake")


def _touch(path: Path) -> None:
    path.touch()
    os.utime(path)


def _is_postgres(settings: Settings) -> bool:
    return settings.resolved_database_url.startswith("postgresql")


def notify(settings: Settings) -> None:
    """Ask the active scheduler for a pass now; never raises (it ticks anyway)."""
    try:
        if _is_postgres(settings):
            with get_engine(settings.resolved_database_url).begin() as conn:
                conn.execute(text(f"NOTIFY {CHANNEL}"))
            return
        _touch(_wake_file(settings))
    except Exception as exc:  # a wake-up is an optimisation
        log.debug("could not wake the scheduler: %s", exc)


def after_commit(engine: Engine) -> None:
    """Wake the scheduler after a committed change to the jobs it places (core/jobs.py calls it: a submit,
    a requeue, a job's end), on the database `engine` writes to; never raises (it ticks anyway)."""
    try:
        backend = engine.url.get_backend_name()
        if backend == "postgresql":
            with engine.begin() as conn:
                conn.execute(text(f"NOTIFY {CHANNEL}"))
        elif backend == "sqlite" and engine.url.database and engine.url.database != ":memory:":
            _touch(_sqlite_wake_file(engine.url.database))
    except Exception as exc:  # a wake-up is an optimisation
        log.debug("could not wake the scheduler: %s", exc)


def commit_watch(engine: Engine) -> kombu_compat.BrokerWatch | None:
    """An inotify watch that `after_commit` on `engine`'s SQLite database makes readable (a supervisor
    sleeps on it to see a cancel at once: api/routes/jobs.py touches after one); None on PostgreSQL, an
    in-memory database, or without inotify. Only the touch's utime is watched (IN_ATTRIB): the database's
    own writes beside it (its -wal) wake nobody."""
    if engine.url.get_backend_name() != "sqlite" or not engine.url.database or engine.url.database == ":memory:":
        return None
    path = os.path.abspath(_sqlite_wake_file(engine.url.database))
    watch = kombu_compat.BrokerWatch([path], kombu_compat.TOUCHES & ~kombu_compat.WRITES)
    return watch if watch.fd is not None else None


class Waiter:
    """The scheduler's sleep between passes, cut short by `notify`."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._file = _wake_file(settings)
        self._seen = self._mtime()
        self._listening: Any = None  # the psycopg connection LISTENing (PostgreSQL)
        # inotify on the file's folder (None: not Linux, or the folder is missing): touches made while
        # a pass runs stay queued, so the next wait returns at once, as the mtime check did.
        watch = kombu_compat.BrokerWatch([str(self._file)], kombu_compat.TOUCHES)
        self._watch = watch if watch.fd is not None else None
        weakref.finalize(self, watch.close)

    def _mtime(self) -> float:
        try:
            return self._file.stat().st_mtime
        except OSError:
            return 0.0

    def listen_on(self, driver_connection: Any) -> None:
        """PostgreSQL: LISTEN on the leader's own connection (autocommit: a notification arrives between
        transactions)."""
        driver_connection.autocommit = True
        driver_connection.execute(f"LISTEN {CHANNEL}")
        self._listening = driver_connection

    def forget(self) -> None:
        self._listening = None

    def wait(self, timeout_s: float) -> bool:
        """Sleep up to `timeout_s`; True when woken by a notify."""
        if self._listening is not None:
            try:
                return any(True for _ in self._listening.notifies(timeout=timeout_s, stop_after=1))
            except Exception:  # the connection broke: the leader notices on its next check
                self._listening = None
                time.sleep(min(timeout_s, 1.0))
                return False
        if self._watch is not None:
            if self._watch.wait(timeout_s, FILE_CHECK_S):
                self._seen = self._mtime()
                return True
            return False
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            mtime = self._mtime()
            if mtime != self._seen:
                self._seen = mtime
                return True
            time.sleep(FILE_CHECK_S)
        return False
