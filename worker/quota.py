"""A job's quotas on time and disk, and its events' line cap (issue 19 items 4 and 6): when one is broken
the worker stops the ranks (SIGTERM: they save a checkpoint) and the job fails with the numbers
(worker/stop_reason.py `StopReason.limit`, worker/decide.py).

- `max_runtime_s` (spec): wall-clock seconds since the job first started running, every attempt and any
  wait between them included (a restart does not reset it, so `max_restarts` cannot stretch it).
- `disk_limit_mb` (spec; default RANKZERO_JOB_DISK_LIMIT_MB, 0 none): the run dir's allocated size,
  measured once per heartbeat. The run dir is the one place a sandboxed job can write that outlives it.
- an `events.jsonl` line over 1 MiB (worker/ingest_events.py MAX_EVENT_LINE): the worker never holds it; the job
  fails, since a dropped event could be the one that says how it ended (a demanding user would rather
  read why than get a curve with a silent hole).

`breach` is the pure rule; `QuotaWatch` feeds it what node 0 (or a follower, time only) measures.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from core.settings import Settings
from trainer.spec import JobSpec
from worker.ingest_events import MAX_EVENT_LINE

MIB = 1 << 20
MAX_WALK_ENTRIES = 1_000_000  # a run dir with more entries than this counts as over any limit


@dataclass(frozen=True)
class Quota:
    max_runtime_s: int | None = None
    disk_limit_mb: int | None = None  # None: no limit

    @classmethod
    def of(cls, spec: JobSpec, settings: Settings) -> Quota:
        disk = spec.disk_limit_mb if spec.disk_limit_mb is not None else settings.job_disk_limit_mb or None
        return cls(max_runtime_s=spec.max_runtime_s, disk_limit_mb=disk)


def breach(quota: Quota, ran_s: float | None, run_dir_bytes: int | None, overlong_lines: int = 0) -> str | None:
    """The quota the job broke, in the words its failure shows (None: within all of them). `ran_s`: seconds
    since its first start; `run_dir_bytes`: its run dir's size (None: not measured this time)."""
    if overlong_lines:
        return (
            f"rank 0 wrote an events.jsonl line longer than {MAX_EVENT_LINE // MIB} MiB, which the worker does not "
            "read (an event is a few hundred bytes: write large data to a file in the run dir, not to an event)"
        )
    if quota.max_runtime_s is not None and ran_s is not None and ran_s >= quota.max_runtime_s:
        return f"it ran {ran_s:,.0f} s, reaching its max_runtime_s of {quota.max_runtime_s:,} s"
    if quota.disk_limit_mb is not None and run_dir_bytes is not None and run_dir_bytes > quota.disk_limit_mb * MIB:
        return (
            f"its run dir holds {run_dir_bytes / MIB:,.0f} MiB, over its disk_limit_mb of {quota.disk_limit_mb:,} MiB "
            "(checkpoints count: lower checkpoint.keep_last, or raise disk_limit_mb)"
        )
    return None


def dir_bytes(root: Path, max_entries: int = MAX_WALK_ENTRIES) -> int:
    """The disk space the files under `root` take (allocated blocks; symlinks not followed, each hard link
    counted once). Bounded: past `max_entries` entries the walk stops and returns a size over any limit."""
    total, entries, seen = 0, 0, set[tuple[int, int]]()
    stack = [root]
    while stack:
        try:
            it = os.scandir(stack.pop())
        except OSError:
            continue
        with it:
            for entry in it:
                entries += 1
                if entries > max_entries:
                    return 1 << 62
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                elif (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_blocks * 512
    return total


def seconds_since(started_at: datetime | None, now: datetime | None = None) -> float | None:
    if started_at is None:
        return None
    # SQLite gives naive datetimes, in UTC
    began = started_at if started_at.tzinfo is not None else started_at.replace(tzinfo=timezone.utc)
    return ((now or datetime.now(timezone.utc)) - began).total_seconds()


class QuotaWatch:
    """Measures what `breach` needs: the time since the job's first start at every look, its run dir's size
    at most once every `disk_every_s` (a walk of the run dir; none when no disk limit applies)."""

    def __init__(self, quota: Quota, run_root: Path, started_at: datetime | None, disk_every_s: float) -> None:
        self.quota = quota
        self.run_root = run_root
        # monotonic time of the job's first start (the row's started_at, or now for a row without one)
        self._t0 = time.monotonic() - max(0.0, seconds_since(started_at) or 0.0)
        self.disk_every_s = disk_every_s
        self._next_disk = 0.0
        self.run_dir_bytes: int | None = None

    def ran_s(self, now: float) -> float:
        return now - self._t0

    def check(self, now: float, overlong_lines: int = 0, runtime_margin_s: float = 0.0) -> str | None:
        measured: int | None = None
        if self.quota.disk_limit_mb is not None and now >= self._next_disk:
            measured = self.run_dir_bytes = dir_bytes(self.run_root)
            self._next_disk = now + self.disk_every_s
        return breach(self.quota, self.ran_s(now) - runtime_margin_s, measured, overlong_lines)
