"""Reading rank 0's events.jsonl as it grows and writing it to the database in batches.

Idempotent on (job, seq): points insert with ON CONFLICT DO NOTHING and the job row remembers the
last seq ingested, so a restarted worker re-reads the file without duplicating anything. A resumed
attempt replays the steps after its checkpoint; those points already exist (same name and step)
and are skipped, so a curve has no duplicate and no hole.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine
from sqlmodel import Session

from core import jobs, metric_rollup
from core.tables import Checkpoint, Job, MetricPoint, utcnow
from trainer.event_types import EventType

BATCH = 20_000  # events per transaction
COPY_THRESHOLD = 500  # PostgreSQL: from this many points on, COPY beats INSERT … VALUES


class EventTail:
    """Complete lines appended to a file since the last call (a partial last line waits)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self._partial = b""

    def read(self, max_bytes: int = 8 << 20) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                chunk = fh.read(max_bytes)
        except FileNotFoundError:
            return []
        self.offset += len(chunk)
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()
        events = []
        for line in lines:
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a torn line from a killed writer; the next line carries on
            if isinstance(event, dict) and isinstance(event.get("seq"), int):
                events.append(event)
        return events


@dataclass
class EventsSeen:
    """What the events said about how the attempt ended (None fields: not said).

    Only the events' account: the outcome the worker writes to the job row is `core.jobs`'s business.
    """

    started: dict[str, Any] | None = None
    finished: bool = False
    stopped: dict[str, Any] | None = None
    failed: dict[str, Any] | None = None
    last_event_seq: int = -1
    points: int = 0
    checkpoints: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class _Batch:
    """What one batch of events writes, in one transaction."""

    job_id: int
    seen: EventsSeen
    # Copied from the ingestor and kept only once the write commits: a failed write (database down) is retried whole.
    max_step: dict[str, int]
    points: list[dict[str, Any]] = field(default_factory=list)
    ckpts: list[dict[str, Any]] = field(default_factory=list)
    progress: dict[str, Any] = field(default_factory=dict)


def _insert(engine: Engine, table: Any) -> Any:
    dialect = postgresql if engine.dialect.name == "postgresql" else sqlite
    return dialect.insert(table)


def _finite(value: Any) -> float | None:
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


# --- one handler per event type -----------------------------------------------------------------
# `note` sees every event, even one already ingested (a restarted worker must still learn how the
# attempt ended); `write` sees only events not yet ingested and adds their rows to the batch.

Event = dict[str, Any]


def _ignore(_target: Any, _ev: Event) -> None:
    pass


@dataclass(frozen=True)
class _Handler:
    note: Callable[[EventsSeen, Event], None] = _ignore
    write: Callable[[_Batch, Event], None] = _ignore


def _note_started(seen: EventsSeen, ev: Event) -> None:
    seen.started = ev


def _note_finished(seen: EventsSeen, _ev: Event) -> None:
    seen.finished = True


def _note_stopped(seen: EventsSeen, ev: Event) -> None:
    seen.stopped = ev


def _note_failed(seen: EventsSeen, ev: Event) -> None:
    seen.failed = ev


def _write_started(batch: _Batch, ev: Event) -> None:
    if isinstance(ev.get("total_steps"), int):
        batch.progress["total_steps"] = ev["total_steps"]
    if isinstance(ev.get("start_step"), int):
        batch.progress["step"] = ev["start_step"]


def _write_progress(batch: _Batch, ev: Event) -> None:
    for key in ("step", "total_steps", "epoch", "samples"):
        if isinstance(ev.get(key), int):
            batch.progress[key] = ev[key]
    for key in ("samples_per_s", "eta_s"):
        if key in ev:
            batch.progress[key] = _finite(ev[key])


def _write_metric(batch: _Batch, ev: Event) -> None:
    name, value, step = ev.get("name"), _finite(ev.get("value")), ev.get("step")
    if not isinstance(name, str) or value is None or not isinstance(step, int):
        return
    if step <= batch.max_step.get(name, -1):
        return  # a resumed attempt replaying steps we already hold
    batch.max_step[name] = step
    batch.points.append(
        {
            "job_id": batch.job_id,
            "seq": ev["seq"],
            "step": step,
            "name": name[:200],
            "value": value,
            "time": float(ev.get("time", 0.0)),
        }
    )
    if name == "train/loss":
        batch.progress["latest_loss"] = value


def _write_checkpoint(batch: _Batch, ev: Event) -> None:
    if not isinstance(ev.get("path"), str):
        return
    row = {
        "job_id": batch.job_id,
        "step": int(ev.get("step", 0)),
        "epoch": ev.get("epoch"),
        "path": ev["path"],
        "bytes": int(ev.get("bytes", 0)),
        "sha256": str(ev.get("sha256", ""))[:64],
        "created_at": utcnow(),
    }
    batch.ckpts.append(row)
    batch.seen.checkpoints.append(row)


HANDLERS: dict[EventType, _Handler] = {
    EventType.started: _Handler(note=_note_started, write=_write_started),
    EventType.progress: _Handler(write=_write_progress),
    EventType.metric: _Handler(write=_write_metric),
    EventType.checkpoint: _Handler(write=_write_checkpoint),
    EventType.stopped: _Handler(note=_note_stopped),
    EventType.finished: _Handler(note=_note_finished),
    EventType.failed: _Handler(note=_note_failed),
}
_unhandled = [t.value for t in EventType if t not in HANDLERS]
if _unhandled:  # a new EventType needs its handler here (a plain `assert` would vanish under python -O)
    raise RuntimeError(f"worker/ingest.py has no handler for event types {_unhandled}")
_BY_NAME: dict[str, _Handler] = {t.value: h for t, h in HANDLERS.items()}
_UNKNOWN = _Handler()  # a type this version does not know (a newer trainer?): skipped, its seq still counts


def _handler_for(kind: object) -> _Handler:
    return _BY_NAME.get(kind, _UNKNOWN) if isinstance(kind, str) else _UNKNOWN


class Ingestor:
    """Writes one job's events. Keep one per supervised job; `ingest` is safe to call with repeats."""

    def __init__(self, engine: Engine, job_id: int, run_root: Path | None = None, attempt: int | None = None) -> None:
        self.engine = engine
        self.job_id = job_id
        self.run_root = run_root
        self.attempt = attempt  # the supervisor's attempt: its writes are fenced by it (core.jobs.FencedOut)
        self.seen = EventsSeen()
        with Session(engine) as s:
            job = s.get(Job, job_id)
            self.ingested_seq = job.ingested_seq if job else -1
            rows = s.execute(
                select(MetricPoint.name, func.max(MetricPoint.step))
                .where(MetricPoint.job_id == job_id)
                .group_by(MetricPoint.name)
            ).all()
        self.max_step: dict[str, int] = {name: int(step) for name, step in rows}
        self._points = _insert(engine, MetricPoint.__table__).on_conflict_do_nothing(index_elements=["job_id", "seq"])
        self._ckpts = _insert(engine, Checkpoint.__table__).on_conflict_do_nothing(index_elements=["job_id", "path"])

    def ingest(self, events: list[dict[str, Any]]) -> int:
        """Write `events` (already-ingested seqs are skipped); return how many metric points were new."""
        new = 0
        for start in range(0, len(events), BATCH):
            new += self._ingest_batch(events[start : start + BATCH])
        return new

    def ingest_metrics(self, events: list[dict[str, Any]]) -> int:
        """Metric events from another source than events.jsonl (TensorBoard files: worker/tensorboard.py).

        Written as `metric` events are, skipping steps already held per name (so a restarted worker
        re-reading the files writes nothing twice), with seqs of their own space (from
        metric_rollup.EXTERNAL_SEQ_BASE up, never one of events.jsonl's), folded into the rollups in
        the same transaction; `ingested_seq` is not touched. Returns how many points were new.
        """
        batch = _Batch(job_id=self.job_id, seen=self.seen, max_step=dict(self.max_step))
        seq = self._next_external_seq()
        for ev in events:
            before = len(batch.points)
            _write_metric(batch, {**ev, "seq": seq})
            seq += len(batch.points) - before
        if not batch.points:
            return 0
        first, last = batch.points[0]["seq"], batch.points[-1]["seq"]
        with self.engine.begin() as conn:
            self._insert_points(conn, batch.points)
            metric_rollup.fold(conn, self.job_id, first - 1, last)
            jobs.record_ingested(conn, self.job_id, self.ingested_seq, batch.progress)
        self.max_step = batch.max_step
        self.seen.points += len(batch.points)
        return len(batch.points)

    def _next_external_seq(self) -> int:
        with self.engine.connect() as conn:
            top = conn.execute(
                select(func.max(MetricPoint.seq)).where(
                    MetricPoint.job_id == self.job_id, MetricPoint.seq >= metric_rollup.EXTERNAL_SEQ_BASE
                )
            ).scalar()
        return metric_rollup.EXTERNAL_SEQ_BASE if top is None else int(top) + 1

    @property
    def outcome(self) -> EventsSeen:
        """The old name of `seen`, kept until tests/reliability/test_rel_sqlite_load.py reads `seen`."""
        return self.seen

    def _ingest_batch(self, events: list[Event]) -> int:
        batch = _Batch(job_id=self.job_id, seen=self.seen, max_step=dict(self.max_step))
        top = self.ingested_seq
        for ev in events:
            seq = ev["seq"]
            self.seen.last_event_seq = max(self.seen.last_event_seq, seq)
            handler = _handler_for(ev.get("type"))
            handler.note(self.seen, ev)
            if seq <= self.ingested_seq:
                continue
            top = max(top, seq)
            handler.write(batch, ev)
        if top == self.ingested_seq and not batch.progress:
            return 0
        self._write(batch, top)
        self.ingested_seq = top
        self.max_step = batch.max_step
        self.seen.points += len(batch.points)
        return len(batch.points)

    def _write(self, batch: _Batch, top: int) -> None:
        """The batch's rows and the job's progress up to seq `top`, in one transaction."""
        with self.engine.begin() as conn:
            if batch.points:
                self._insert_points(conn, batch.points)
            if batch.ckpts:
                conn.execute(self._ckpts, batch.ckpts)
                self._forget_deleted_checkpoints(conn)
            jobs.record_ingested(conn, self.job_id, top, batch.progress, attempt=self.attempt)

    def _insert_points(self, conn: Any, points: list[dict[str, Any]]) -> None:
        if self.engine.dialect.name != "postgresql" or len(points) < COPY_THRESHOLD:
            conn.execute(self._points, points)
            return
        # PostgreSQL's fast path: COPY into a temporary table, then one INSERT … SELECT … ON CONFLICT
        # DO NOTHING (COPY itself cannot skip duplicates). Several times faster than multi-row VALUES.
        cur = conn.connection.dbapi_connection.cursor()
        try:
            # events.jsonl is the durable copy: a batch lost in a server crash is lost together with
            # its ingested_seq (same transaction) and simply re-read, so the commit need not wait for fsync.
            cur.execute("SET LOCAL synchronous_commit TO OFF")
            cur.execute(
                "CREATE TEMP TABLE IF NOT EXISTS rz_points_in (job_id bigint, seq bigint, step bigint, name text, "
                "value double precision, time double precision) ON COMMIT DELETE ROWS"
            )
            with cur.copy("COPY rz_points_in (job_id, seq, step, name, value, time) FROM STDIN") as copy:
                for p in points:
                    copy.write_row((p["job_id"], p["seq"], p["step"], p["name"], p["value"], p["time"]))
            cur.execute(
                "INSERT INTO metric_points (job_id, seq, step, name, value, time) "
                "SELECT job_id, seq, step, name, value, time FROM rz_points_in "
                "ON CONFLICT (job_id, seq) DO NOTHING"
            )
        finally:
            cur.close()

    def _forget_deleted_checkpoints(self, conn: Any) -> None:
        """keep_last makes the trainer delete old files; their rows go too, so every listed one downloads."""
        if self.run_root is None:
            return
        rows = conn.execute(select(Checkpoint.id, Checkpoint.path).where(Checkpoint.job_id == self.job_id)).all()
        gone = [cid for cid, path in rows if not (self.run_root / path).is_file()]
        if gone:
            conn.execute(delete(Checkpoint).where(Checkpoint.id.in_(gone)))  # type: ignore[attr-defined]
