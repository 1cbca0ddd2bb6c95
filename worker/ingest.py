"""Reading rank 0's events.jsonl as it grows and writing it to the database in batches.

Idempotent on (job, seq): points insert with ON CONFLICT DO NOTHING (PostgreSQL: a COPY, which the
unique (job, seq) index turns back to that path when any of its rows is there already) and the job
row remembers the last seq ingested, so a restarted worker re-reads the file without duplicating anything. A resumed
attempt replays the steps after its checkpoint; those points already exist (same name and step)
and are skipped, so a curve has no duplicate and no hole.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine
from sqlmodel import Session, col

from core import jobs, metric_rollup
from core.tables import Checkpoint, Job, MetricPoint
from worker.ingest_copy import PointStream, copy_points
from worker.ingest_handlers import (
    POINT_COLUMNS,
    Batch,
    Event,
    EventsSeen,
    MetricLine,
    Point,
    SeriesCaps,
    TimedMetric,
    handler_for,
    ignore,
    step_from_metrics,
    write_metric,
)

BATCH = 20_000  # events per transaction
COPY_THRESHOLD = 500  # PostgreSQL: from this many points on, COPY beats INSERT … VALUES
STREAM_EVERY = 1_000  # PostgreSQL: events handled between two hand-overs of their points to the open COPY


def _insert(engine: Engine, table: Any) -> Any:
    dialect = postgresql if engine.dialect.name == "postgresql" else sqlite
    return dialect.insert(table)


class Ingestor:
    """Writes one job's events. Keep one per supervised job; `ingest` is safe to call with repeats."""

    def __init__(
        self,
        engine: Engine,
        job_id: int,
        run_root: Path | None = None,
        attempt: int | None = None,
        caps: SeriesCaps | None = None,
    ) -> None:
        self.engine = engine
        self.caps = caps
        self._noted_at = 0  # dropped points when the timeline last said so (`_note_dropped`)
        self.job_id = job_id
        self.run_root = run_root
        self.attempt = attempt  # the supervisor's attempt: its writes are fenced by it (core.jobs.FencedOut)
        self.seen = EventsSeen()
        with Session(engine) as s:
            job = s.get(Job, job_id)
            self.ingested_seq = job.ingested_seq if job else -1
            row_step = job.step if job else 0
            rows = s.execute(
                select(col(MetricPoint.name), func.max(col(MetricPoint.step)), func.count())
                .where(col(MetricPoint.job_id) == job_id)
                .group_by(col(MetricPoint.name))
            ).all()
        self.max_step: dict[str, int] = {name: int(step) for name, step, _ in rows}
        self.progress_reported = False  # see `_step_from_metrics`
        # The step the metrics (or checkpoints) gave last: never below the row's, which a checkpoint may have set.
        self.metric_step = max(step_from_metrics(self.max_step) or 0, row_step)
        self.counts: dict[str, int] = {name: int(n) for name, _, n in rows}
        mark = "%s" if engine.dialect.name == "postgresql" else "?"
        self._insert_sql = (
            f"INSERT INTO metric_points ({', '.join(POINT_COLUMNS)}) VALUES ({', '.join([mark] * len(POINT_COLUMNS))}) "
            "ON CONFLICT (job_id, seq) DO NOTHING"
        )
        # sqlmodel's stubs do not declare a table model's `__table__` (SQLAlchemy sets it on the class).
        table = Checkpoint.__table__  # pyright: ignore[reportAttributeAccessIssue]
        self._ckpts = _insert(engine, table).on_conflict_do_nothing(index_elements=["job_id", "path"])

    def ingest(self, events: list[dict[str, Any]]) -> int:
        """Write `events` (already-ingested seqs are skipped); return how many metric points were new."""
        new = 0
        for start in range(0, len(events), BATCH):
            new += self._ingest_batch(events[start : start + BATCH])
        return new

    def ingest_metrics(
        self, events: list[TimedMetric], progress: dict[str, Any] | None = None, *, steps_from_metrics: bool = True
    ) -> int:
        """Metric events from another source than events.jsonl (TensorBoard files: worker/tensorboard.py).

        Written as `metric` events are, skipping steps already held per name (so a restarted worker
        re-reading the files writes nothing twice), with seqs of their own space (from
        metric_rollup.EXTERNAL_SEQ_BASE up, never one of events.jsonl's), folded into the rollups in
        the same transaction; `ingested_seq` is not touched. Returns how many points were new.
        `progress`: job row columns to write with them (the console's step counter: worker/console_feed.py).
        `steps_from_metrics`: False for the console's points, whose steps are its counter's (sent in `progress`
        when it moves): a dict line keyed by an earlier counter value must not move the job's step back.
        """
        batch = self._new_batch(progress)
        seq = self._next_external_seq()
        for ev in events:
            before = len(batch.points)
            line: MetricLine = {**ev, "seq": seq}
            write_metric(batch, line)
            seq += len(batch.points) - before
        if steps_from_metrics and "step" not in batch.progress:
            self._step_from_metrics(batch)
        if not batch.points and not batch.progress:
            return 0
        with self.engine.begin() as conn:
            if batch.points:
                self._insert_points(conn, batch.points)
                metric_rollup.fold(conn, self.job_id, batch.points[0][1] - 1, batch.points[-1][1])
            jobs.record_ingested(conn, self.job_id, self.ingested_seq, batch.progress)
        self._kept(batch)
        return len(batch.points)

    def _step_from_metrics(self, batch: Batch) -> None:
        """Without `progress` events (ever, in this ingestor's life), the job's step is its metrics' newest:
        `rankzero.progress`, else `rankzero.log`, else TensorBoard (else the console feed's counter); or its
        newest checkpoint's, when that is further (a script that only saves checkpoints reports its step)."""
        self.progress_reported = self.progress_reported or batch.progress_reported
        if self.progress_reported or "step" in batch.progress:
            return
        step = _reported_step(batch)
        if step is not None and step > self.metric_step:
            batch.progress["step"] = step

    def _new_batch(self, progress: dict[str, Any] | None = None) -> Batch:
        counts = dict(self.counts) if self.caps is not None else {}
        return Batch(job_id=self.job_id, seen=self.seen, max_step=dict(self.max_step), progress=dict(progress or {}),
                      caps=self.caps, counts=counts)  # fmt: skip

    def _kept(self, batch: Batch) -> None:
        """A batch committed: keep what it learnt, and say on the job's timeline when the caps dropped points."""
        self.max_step = batch.max_step
        self.counts = batch.counts
        self.metric_step = max(self.metric_step, _reported_step(batch) or 0)
        self.seen.points += len(batch.points)
        self._note_dropped()

    def _note_dropped(self) -> None:
        """A timeline line when the caps first drop a point, then each time the count grows a hundredfold (a
        flood writes a handful of lines, never one per batch)."""
        dropped = self.caps.dropped_points if self.caps is not None else 0
        if self.caps is None or dropped == 0 or (self._noted_at and dropped < 100 * self._noted_at):
            return
        self._noted_at = dropped
        jobs.note(self.engine, self.job_id, self.caps.words())

    def _next_external_seq(self) -> int:
        with self.engine.connect() as conn:
            top = conn.execute(
                select(func.max(col(MetricPoint.seq))).where(
                    col(MetricPoint.job_id) == self.job_id, col(MetricPoint.seq) >= metric_rollup.EXTERNAL_SEQ_BASE
                )
            ).scalar()
        return metric_rollup.EXTERNAL_SEQ_BASE if top is None else int(top) + 1

    def _ingest_batch(self, events: list[Event]) -> int:
        batch = self._new_batch()
        if self.engine.dialect.name == "postgresql" and len(events) >= COPY_THRESHOLD:
            top = self._stream_batch(events, batch)
        else:
            top = self._handle(events, batch)
            if top == self.ingested_seq and not batch.progress:
                return 0
            self._write(batch, top)
        self.ingested_seq = top
        self._kept(batch)
        return len(batch.points)

    def _handle(self, events: list[Event], batch: Batch, send: Callable[[], None] | None = None) -> int:
        """Each event to its handlers, into `batch`; returns the highest seq ingested with it. `send`: called
        every STREAM_EVERY events, to hand the points built so far to an open COPY (`_stream_batch`)."""
        seen, done = self.seen, self.ingested_seq
        top, last = done, seen.last_event_seq
        for i, ev in enumerate(events):  # per event of a burst of 100,000s: plain comparisons, no call to skip
            seq = ev["seq"]
            if seq > last:
                last = seq
            handler = handler_for(ev.get("type"))
            if handler.note is not ignore:
                handler.note(seen, ev)
            if seq <= done:
                continue
            if seq > top:
                top = seq
            handler.write(batch, ev)
            if send is not None and i % STREAM_EVERY == 0:
                send()
        seen.last_event_seq = last
        self._step_from_metrics(batch)
        return top

    def _stream_batch(self, events: list[Event], batch: Batch) -> int:
        """PostgreSQL, a large batch: its points COPYed while its events are read, then the rest of the batch's
        rows and the offset, all in one transaction (nothing new: the empty COPY commits, the offset stays)."""
        with self.engine.begin() as conn:
            with PointStream(conn, self.job_id, batch.points) as stream:
                top = self._handle(events, batch, stream.send)
            if top != self.ingested_seq or batch.progress:
                self._write_rows(conn, batch, top)
        return top

    def _write(self, batch: Batch, top: int) -> None:
        """The batch's rows and the job's progress up to seq `top`, in one transaction."""
        with self.engine.begin() as conn:
            if batch.points:
                self._insert_points(conn, batch.points)
            self._write_rows(conn, batch, top)

    def _write_rows(self, conn: Any, batch: Batch, top: int) -> None:
        """The batch's rows beside its points (checkpoints) and the offset with the job's progress: the last
        statements of the batch's transaction (its points are in already)."""
        if batch.ckpts:
            conn.execute(self._ckpts, batch.ckpts)
            self._forget_deleted_checkpoints(conn)
        jobs.record_ingested(conn, self.job_id, top, batch.progress, attempt=self.attempt)

    def _insert_points(self, conn: Any, points: list[Point]) -> None:
        if self.engine.dialect.name != "postgresql" or len(points) < COPY_THRESHOLD:
            conn.exec_driver_sql(self._insert_sql, points)
        else:
            copy_points(conn, self.job_id, points)

    def _forget_deleted_checkpoints(self, conn: Any) -> None:
        """keep_last makes the trainer delete old files; their rows go too, so every listed one downloads."""
        if self.run_root is None:
            return
        ckpts = select(col(Checkpoint.id), col(Checkpoint.path)).where(col(Checkpoint.job_id) == self.job_id)
        rows = conn.execute(ckpts).all()
        gone = [cid for cid, path in rows if not (self.run_root / path).is_file()]
        if gone:
            conn.execute(delete(Checkpoint).where(Checkpoint.id.in_(gone)))  # type: ignore[attr-defined]


def _reported_step(batch: Batch) -> int | None:
    """The furthest step a batch's own series or checkpoints name (None: neither names one)."""
    named = (step_from_metrics(batch.max_step), *(c["step"] for c in batch.ckpts))
    steps = [step for step in named if step is not None]
    return max(steps) if steps else None
