"""Every rank's progress, one small file a rank: `<run>/ranks/rank_<N>.json` (issue 38: which rank is stuck,
which rank is slow). Stdlib only: the trainer, the SDK (any rank) and the worker use it.

events.jsonl is rank 0's alone, so it cannot say which rank stopped or lags. Each rank keeps its own
record in memory (`RankProgress`: a step done, its own work begun or ended) and a daemon thread writes
it when it changed, at most once a `every_s`, by a rename (a reader never sees half a file). The
training loop only sets a few attributes: no I/O, no lock on the step's path. The thread also runs
while the loop is blocked (in a collective, in `time.sleep`), so what a hung rank last did is on disk.

A record (JSON object):
    rank, pid          global rank; its pid in its own namespace (the worker finds the host pid itself)
    attempt            RANKZERO_ATTEMPT (an earlier attempt's record is not this one's)
    step, progress_at  the last step it finished and when (unix seconds); null before the first
    phase, phase_at    "work" (its own work of a step: data, forward) or "wait" (past it: syncing with
                       the others, or between steps), and since when; null where nothing marks work
    step_s             median wall seconds between its last `WINDOW` step ends
    work_s             median seconds of its own work per step over the window (null: not marked); under
                       collectives every rank's wall step time is the slowest rank's, so only this tells
                       the slow rank apart (core/rank_health.py scores it)
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import threading
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trainer import no_follow

WINDOW = 50  # step times kept for the medians
WRITE_EVERY_S = 1.0
RECORD_MAX_BYTES = 4096  # a record is read this far at most (the job writes its run dir)
MAX_RANKS = 4096
FILE_PREFIX = "rank_"


def _attempt() -> int | None:
    """This process's attempt (RANKZERO_ATTEMPT, set by the worker; rankzero.env is not imported: no cycle)."""
    try:
        return int(os.environ.get("RANKZERO_ATTEMPT", ""))
    except ValueError:
        return None


def record_name(rank: int) -> str:
    return f"{FILE_PREFIX}{int(rank)}.json"


class RankProgress:
    """One rank's record, written by a daemon thread (`start`) to `folder/rank_<rank>.json`."""

    def __init__(self, folder: Path, rank: int, every_s: float = WRITE_EVERY_S, window: int = WINDOW) -> None:
        self.folder, self.rank, self.every_s = folder, int(rank), every_s
        self.attempt = _attempt()
        self.step: int | None = None
        self.progress_at: float | None = None
        self.phase: str | None = None
        self.phase_at: float | None = None
        self._step_times: deque[float] = deque(maxlen=window)
        self._work_times: deque[float] = deque(maxlen=window)
        self._work_began: float | None = None
        self._work_this_step = 0.0
        self._last_end: float | None = None  # monotonic, of the last step end
        self._version = 0  # bumped by every change; the thread writes when it moved
        self._written = -1
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None

    # --- what the loop calls (cheap: attributes only) ------------------------------------------------

    def step_done(self, step: int) -> None:
        """Step `step` is finished on this rank."""
        now = time.monotonic()
        if self._work_began is not None:  # the step ended inside a work mark: its part so far is this step's
            self._work_this_step += now - self._work_began
            self._work_began = now
        if self._last_end is not None and now > self._last_end:
            self._step_times.append(now - self._last_end)
        if self._work_this_step > 0:
            self._work_times.append(self._work_this_step)
        self._last_end, self._work_this_step = now, 0.0
        self.step, self.progress_at = int(step), time.time()
        self._version += 1

    def work_began(self) -> None:
        """This rank starts its own part of a step (what no other rank waits for it to end: data, forward)."""
        self._work_began = time.monotonic()
        self.phase, self.phase_at = "work", time.time()
        self._version += 1

    def work_ended(self) -> None:
        """Its own part is done: from here it syncs with the others (or goes on to the next step)."""
        if self._work_began is not None:
            self._work_this_step += time.monotonic() - self._work_began
            self._work_began = None
        self.phase, self.phase_at = "wait", time.time()
        self._version += 1

    @contextlib.contextmanager
    def work(self) -> Iterator[None]:
        self.work_began()
        try:
            yield
        finally:
            self.work_ended()

    # --- the record --------------------------------------------------------------------------------

    def record(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "pid": os.getpid(),
            "attempt": self.attempt,
            "step": self.step,
            "progress_at": self.progress_at,
            "phase": self.phase,
            "phase_at": self.phase_at,
            "step_s": _median(self._step_times),
            "work_s": _median(self._work_times),
        }

    def write(self) -> None:
        """Write the record now (a rename: whole or not at all); never raises (a beat never fails a run)."""
        version = self._version
        path = self.folder / record_name(self.rank)
        tmp = self.folder / f".{record_name(self.rank)}.{os.getpid()}.tmp"
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(self.record()), encoding="utf-8")
            os.replace(tmp, path)
            self._written = version
        except (OSError, ValueError, RuntimeError):  # a full disk; never the writer thread's end
            with contextlib.suppress(OSError):
                tmp.unlink()

    def start(self) -> RankProgress:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="rank-progress", daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        """Stop the thread and write what changed since its last write."""
        self._closed = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * self.every_s + 1)
        if self._version != self._written:
            self.write()

    def _loop(self) -> None:
        while not self._closed:
            if self._version != self._written:
                self.write()
            self._wake.wait(self.every_s)


def _median(times: deque[float]) -> float | None:
    """The median of a window the loop appends to from another thread (tuple() copies it in one C call)."""
    held = tuple(times)
    return statistics.median(held) if held else None


def read_all(folder: Path, root: Path) -> dict[int, dict[str, Any]]:
    """Global rank → its record, of every readable record in `folder` (below the run dir `root`; no link
    followed, each read bounded: the job writes its run dir). A torn or foreign file is skipped."""
    found: dict[int, dict[str, Any]] = {}
    try:
        names = sorted(os.listdir(folder))[:MAX_RANKS]
    except OSError:
        return found
    for name in names:
        if not (name.startswith(FILE_PREFIX) and name.endswith(".json")):
            continue
        try:
            raw = no_follow.read_text(folder / name, root, max_bytes=RECORD_MAX_BYTES + 1)
            record = json.loads(raw) if len(raw) <= RECORD_MAX_BYTES else None
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and isinstance(record.get("rank"), int) and not isinstance(record["rank"], bool):
            found[int(record["rank"])] = record
    return found
