"""What a supervisor (node 0's, a follower's) sleeps on between looks at its attempt, instead of a fixed
0.25 s tick (issue 29: the tick was a quarter of the worker's CPU while a job ran).

- its ranks' exit: a pidfd of the rank guard, readable the moment it exits (Linux ≥ 5.3): seen at once;
- a committed change to a job row on this SQLite database: core/wake.py's after-commit touch, watched with
  inotify (`wake.commit_watch`): a cancel is read at once, not at the next row read;
- events.jsonl written (node 0): inotify on the run dir (core/kombu_compat.py's `BrokerWatch`), acted on
  at most every `files_gap_s`: a trainer writing ten events a second costs one read and one ingest a
  second, not ten;
- the deadlines the caller gives (`until`): the next row read, heartbeat, sample, or backstop scan of what
  is not watched (the heartbeat file's mtime, TensorBoard's folder, the logs, the drain flags).

Without a pidfd or inotify (not Linux), a wait never sleeps longer than `fallback_s` (settings.poll_s),
and the caller polls as before. How often to do what is `Cadence` (pure).
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import Engine

from core import kombu_compat, wake

# Node 0 ingests what events.jsonl grew by at most this often (a metric reaches the dashboard within it).
FILES_GAP_S = 1.0
# What no wake-up covers (the heartbeat file's mtime, TensorBoard's folder, the logs' marks, drain flags,
# quotas) is looked at least this often; a stall or a quota is seen within it.
SCAN_EVERY_S = 2.0
# The job row (cancel, preemption, another attempt): read this often when a commit on it wakes us (SQLite:
# core/wake.py's touch; the read is the backstop for a missed touch), else at ROW_EVERY_S.
ROW_BACKSTOP_S = 5.0
ROW_EVERY_S = 1.0
FLOOR_S = 0.5


@dataclass(frozen=True)
class Cadence:
    """How often a supervisor does what it does between wake-ups."""

    row_s: float  # reads the job row
    scan_s: float = SCAN_EVERY_S  # looks at what nothing wakes it for
    files_gap_s: float = FILES_GAP_S  # the shortest time between two reads of a written events.jsonl
    floor_s: float = FLOOR_S  # the shortest sleep on deadlines (one that passed but is not met: the database down)

    @classmethod
    def of(cls, commits_wake: bool, files_wake: bool, fallback_s: float) -> Cadence:
        """A supervisor woken by commits reads the row as a backstop only, else every ROW_EVERY_S; one not
        woken by events.jsonl's writes reads its files every FILES_GAP_S (or `fallback_s`, settings.poll_s,
        when that is longer)."""
        row_s = ROW_BACKSTOP_S if commits_wake else max(fallback_s, ROW_EVERY_S)
        scan_s = SCAN_EVERY_S if files_wake else max(fallback_s, FILES_GAP_S)
        return cls(row_s=row_s, scan_s=scan_s)


@dataclass(frozen=True)
class Woken:
    """Why a wait returned (none of them: a deadline passed)."""

    exited: bool = False  # the ranks' process exited
    row: bool = False  # a job row was committed: read ours now
    files: bool = False  # a watched file was written


def _pidfd(proc: subprocess.Popen[bytes]) -> int | None:
    try:
        return os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # not Linux ≥ 5.3, or already reaped
        return None


class Wakeups:
    """One attempt's wake-ups; `close()` at its end. `count`: the waits so far (tests count loop iterations)."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        engine: Engine,
        *,
        files: list[Path] | None = None,
        fallback_s: float = 0.25,
    ) -> None:
        self.proc = proc
        self.fallback_s = fallback_s
        self.pidfd = _pidfd(proc)
        self.commits = wake.commit_watch(engine)
        watch = kombu_compat.BrokerWatch([str(f) for f in files], kombu_compat.WRITES) if files else None
        self.files = watch if watch is not None and watch.fd is not None else None
        self.count = 0

    @property
    def cadence(self) -> Cadence:
        return Cadence.of(self.commits is not None, self.files is not None, self.fallback_s)

    def wait(self, until: float, files_from: float) -> Woken:
        """Sleep until the monotonic time `until`, or until the ranks exit, a commit touches the row, or (not
        before `files_from`) a watched file is written. Without a pidfd, never longer than `fallback_s`."""
        self.count += 1
        if self.pidfd is None:
            until = min(until, time.monotonic() + self.fallback_s)
        while True:
            now = time.monotonic()
            if now >= until:
                return Woken()
            fds = [fd for fd in (self.pidfd, self.commits.fd if self.commits else None) if fd is not None]
            wake_at = until
            if self.files is not None and self.files.fd is not None:
                if now >= files_from:
                    fds.append(self.files.fd)
                else:
                    wake_at = min(until, files_from)  # then watch the files too
            ready = select.select(fds, [], [], max(0.0, wake_at - now))[0] if fds else _sleep(wake_at - now)
            if self.pidfd is not None and self.pidfd in ready:
                return Woken(exited=True)
            row = self.commits is not None and self.commits.fd in ready
            files = self.files is not None and self.files.fd in ready
            if row:
                self.commits.arm()  # pyright: ignore[reportOptionalMemberAccess]
            if files:
                self.files.arm()  # pyright: ignore[reportOptionalMemberAccess]
            if row or files:
                return Woken(row=row, files=files)

    def close(self) -> None:
        if self.pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(self.pidfd)
            self.pidfd = None
        for watch in (self.commits, self.files):
            if watch is not None:
                watch.close()


def _sleep(seconds: float) -> list[int]:
    time.sleep(max(0.0, seconds))
    return []
