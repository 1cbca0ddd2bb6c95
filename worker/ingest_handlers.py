"""What each event of events.jsonl writes: one handler per event type (trainer/event_types.py is the contract),
into a batch of rows, with the per-job caps on series and points. Also what other sources' metrics (TensorBoard,
the console, the worker's system samples) go through: `TimedMetric`, `write_metric`. No database here: the
writer (worker/ingest.py) commits a batch."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from core.tables import utcnow
from trainer.event_types import (
    PROGRESS_COUNTS,
    PROGRESS_RATES,
    CheckpointSaved,
    Envelope,
    EventType,
    Failed,
    Finished,
    JobProgress,
    Metric,
    Progress,
    Started,
    Stopped,
)
from trainer.run_dir import CHECKPOINT_NAME


@dataclass
class EventsSeen:
    """What the events said about how the attempt ended (None fields: not said).

    Only the events' account: the outcome the worker writes to the job row is `core.jobs`'s business.
    """

    started: Started | None = None
    finished: bool = False
    stopped: Stopped | None = None
    failed: Failed | None = None
    last_event_seq: int = -1
    points: int = 0
    checkpoints: list[dict[str, Any]] = field(default_factory=list)


POINT_COLUMNS = ("job_id", "seq", "step", "name", "value", "time")
Point = tuple[int, int, int, str, float, float]  # a metric_points row, in POINT_COLUMNS order


@dataclass
class Batch:
    """What one batch of events writes, in one transaction."""

    job_id: int
    seen: EventsSeen
    # Copied from the ingestor and kept only once the write commits: a failed write (database down) is retried whole.
    max_step: dict[str, int]
    points: list[Point] = field(default_factory=list)
    ckpts: list[dict[str, Any]] = field(default_factory=list)
    # job row columns (JobProgress's, plus latest_loss) → new value
    progress: dict[str, Any] = field(default_factory=dict)
    caps: SeriesCaps | None = None  # the per-job caps on series and points (None: none)
    counts: dict[str, int] = field(default_factory=dict)  # points stored per name (copied like max_step)
    progress_reported: bool = False  # a `progress` event was in the batch (it, not the metrics, gives the step)


@dataclass
class SeriesCaps:
    """One job's caps on what it stores (issue 19 item 4): `max_series` distinct names, `max_points` points per
    name. Past them points are counted here, not stored; the job's timeline says so (`Ingestor._note_dropped`)."""

    max_series: int
    max_points: int
    dropped_points: int = 0
    dropped_names: set[str] = field(default_factory=set)  # bounded: at most MAX_DROPPED_NAMES kept
    full_series: set[str] = field(default_factory=set)  # names that reached max_points (bounded likewise)

    def admit(self, batch: Batch, name: str) -> bool:
        """May a new point of `name` be stored? Counts it when not."""
        count = batch.counts.get(name)
        if count is None and len(batch.counts) >= self.max_series:
            self._drop(self.dropped_names, name)
            return False
        if count is not None and count >= self.max_points:
            self._drop(self.full_series, name)
            return False
        batch.counts[name] = (count or 0) + 1
        return True

    def _drop(self, names: set[str], name: str) -> None:
        self.dropped_points += 1
        if len(names) < MAX_DROPPED_NAMES:
            names.add(name)

    def words(self) -> str:
        parts = []
        if self.dropped_names:
            more = "+" if len(self.dropped_names) >= MAX_DROPPED_NAMES else ""
            parts.append(
                f"{len(self.dropped_names):,}{more} series past its first {self.max_series:,} (RANKZERO_JOB_MAX_SERIES)"
            )
        if self.full_series:
            parts.append(f"{len(self.full_series):,} series past {self.max_points:,} points each "
                         "(RANKZERO_JOB_MAX_POINTS_PER_SERIES)")  # fmt: skip
        return (
            f"metrics over this job's caps are counted, not stored: {self.dropped_points:,} points so far, of "
            + " and ".join(parts)
        )


MAX_DROPPED_NAMES = 10_000


# Steps and counts land in BIGINT columns: a value that is not a plain int, or is past what a run could
# reach, is dropped (and the rest of the event kept): one ill-typed value never ends supervision, and a
# database never sees a number it must refuse (on PostgreSQL that DataError would read as an outage).
_MAX_COUNT = 2**53


def _count(value: Any) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value < _MAX_COUNT
    return value if ok else None


def _own_checkpoint(path: Any) -> bool:
    """A checkpoint row names only a file of the job's own `checkpoints/` folder (`checkpoints/step_N.pt`), so
    a forged event can never make another file downloadable as a checkpoint."""
    if not isinstance(path, str):
        return False
    folder, _, name = path.partition("/")
    return folder == "checkpoints" and CHECKPOINT_NAME.match(name) is not None


def _finite(value: Any) -> float | None:
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


# --- one handler per event type -----------------------------------------------------------------
# `note` sees every event, even one already ingested (a restarted worker must still learn how the
# attempt ended); `write` sees only events not yet ingested and adds their rows to the batch.
# Each handler reads its event as its TypedDict from trainer/event_types.py (the contract), the
# envelope included; the line came from a file, so a field's type is still checked before use.

Event = dict[str, Any]  # a parsed line, before its type is known


class MetricLine(Envelope, Metric):
    pass


class _CheckpointLine(Envelope, CheckpointSaved):
    pass


class TimedMetric(Metric):
    """A metric from another source than events.jsonl (`Ingestor.ingest_metrics`): no seq of its own yet."""

    time: float
    type: str  # EventType.metric's value


def ignore(_target: Any, _ev: Any) -> None:
    pass


@dataclass(frozen=True)
class _Handler:
    # Any: each handler takes its own TypedDict; the table below pairs it with its EventType.
    note: Callable[[EventsSeen, Any], None] = ignore
    write: Callable[[Batch, Any], None] = ignore


def _note_started(seen: EventsSeen, ev: Started) -> None:
    seen.started = ev


def _note_finished(seen: EventsSeen, _ev: Finished) -> None:
    seen.finished = True


def _note_stopped(seen: EventsSeen, ev: Stopped) -> None:
    seen.stopped = ev


def _note_failed(seen: EventsSeen, ev: Failed) -> None:
    seen.failed = ev


def _write_started(batch: Batch, ev: Started) -> None:
    if (total := _count(ev.get("total_steps"))) is not None:
        batch.progress["total_steps"] = total
    if (start := _count(ev.get("start_step"))) is not None:
        batch.progress["step"] = start


SYSTEM_PREFIX = "sys/"  # the worker's own samples (worker/resources.py): never the job's step


def step_from_metrics(max_step: dict[str, int]) -> int | None:
    """The job's step when it reports no progress (a script with `rankzero.log` or TensorBoard only): the
    newest step of its own series. None when it has none (the step is "not reported", never 0)."""
    steps = [step for name, step in max_step.items() if not name.startswith(SYSTEM_PREFIX)]
    return max(steps) if steps else None


def _write_progress(batch: Batch, ev: Progress) -> None:
    batch.progress_reported = True
    fields: JobProgress = ev  # the part of a progress event a job row keeps
    for key in PROGRESS_COUNTS:
        if (count := _count(fields.get(key))) is not None:
            batch.progress[key] = count
    for key in PROGRESS_RATES:
        if key in fields:
            batch.progress[key] = _finite(fields.get(key))


def write_metric(batch: Batch, ev: MetricLine) -> None:
    # The bulk of any events.jsonl, so kept lean: the common case (an int step, a finite float value) is
    # checked inline, anything else by `_count` / `_finite`, which stay the rules; a tuple per point.
    name, step, value = ev.get("name"), ev.get("step"), ev.get("value")
    if type(step) is not int or not 0 <= step < _MAX_COUNT:
        step = _count(step)
        if step is None:
            return
    if not isinstance(name, str):
        return
    if type(value) is not float or value - value != 0.0:  # x - x is 0.0 for a finite float, NaN otherwise
        value = _finite(value)
        if value is None:
            return
    max_step = batch.max_step
    if step <= max_step.get(name, -1):
        return  # a resumed attempt replaying steps we already hold
    if batch.caps is not None and not batch.caps.admit(batch, name):
        return
    max_step[name] = step
    at = ev.get("time", 0.0)
    if type(at) is not float:  # an ill-typed time (a forged line) is 0, never an error that ends supervision
        at = _finite(at) or 0.0
    batch.points.append((batch.job_id, ev["seq"], step, name[:200], value, at))
    if name == "train/loss":
        batch.progress["latest_loss"] = value


def _write_checkpoint(batch: Batch, ev: _CheckpointLine) -> None:
    step, size = _count(ev.get("step")), _count(ev.get("bytes"))
    if not _own_checkpoint(ev.get("path")) or step is None or size is None:
        return
    row = {
        "job_id": batch.job_id,
        "step": step,
        "epoch": _count(ev.get("epoch")),
        "path": ev["path"],
        "bytes": size,
        "sha256": str(ev.get("sha256", ""))[:64],
        "created_at": utcnow(),
    }
    batch.ckpts.append(row)
    batch.seen.checkpoints.append(row)


HANDLERS: dict[EventType, _Handler] = {
    EventType.started: _Handler(note=_note_started, write=_write_started),
    EventType.progress: _Handler(write=_write_progress),
    EventType.metric: _Handler(write=write_metric),
    EventType.checkpoint: _Handler(write=_write_checkpoint),
    EventType.stopped: _Handler(note=_note_stopped),
    EventType.finished: _Handler(note=_note_finished),
    EventType.failed: _Handler(note=_note_failed),
}
_unhandled = [t.value for t in EventType if t not in HANDLERS]
if _unhandled:  # a new EventType needs its handler here (a plain `assert` would vanish under python -O)
    raise RuntimeError(f"worker/ingest_handlers.py has no handler for event types {_unhandled}")
_BY_NAME: dict[str, _Handler] = {t.value: h for t, h in HANDLERS.items()}
_UNKNOWN = _Handler()  # a type this version does not know (a newer trainer?): skipped, its seq still counts


def handler_for(kind: object) -> _Handler:
    return _BY_NAME.get(kind, _UNKNOWN) if isinstance(kind, str) else _UNKNOWN
