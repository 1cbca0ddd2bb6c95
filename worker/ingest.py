"""Reading rank 0's events.jsonl as it grows and writing it to the database in batches.

Idempotent on (job, seq): points insert with ON CONFLICT DO NOTHING and the job row remembers the
last seq ingested, so a restarted worker re-reads the file without duplicating anything. A resumed
attempt replays the steps after its checkpoint; those points already exist (same name and step)
and are skipped, so a curve has no duplicate and no hole.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine
from sqlmodel import Session

from core import jobs
from core.tables import Checkpoint, Job, MetricPoint, utcnow

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
class Outcome:
    """What the events said about how the attempt ended (None fields: not said)."""

    started: dict[str, Any] | None = None
    finished: bool = False
    stopped: dict[str, Any] | None = None
    failed: dict[str, Any] | None = None
    last_event_seq: int = -1
    points: int = 0
    checkpoints: list[dict[str, Any]] = field(default_factory=list)


def _insert(engine: Engine, table: Any) -> Any:
    dialect = postgresql if engine.dialect.name == "postgresql" else sqlite
    return dialect.insert(table)


def _finite(value: Any) -> float | None:
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


class Ingestor:
    """Writes one job's events. Keep one per supervised job; `ingest` is safe to call with repeats."""

    def __init__(self, engine: Engine, job_id: int, run_root: Path | None = None) -> None:
        self.engine = engine
        self.job_id = job_id
        self.run_root = run_root
        self.outcome = Outcome()
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

    def _ingest_batch(self, events: list[dict[str, Any]]) -> int:
        points: list[dict[str, Any]] = []
        ckpts: list[dict[str, Any]] = []
        progress: dict[str, Any] = {}
        top = self.ingested_seq
        max_step = dict(
            self.max_step
        )  # kept only once the write commits: a failed write (database down) is retried whole
        for ev in events:
            seq = ev["seq"]
            self.outcome.last_event_seq = max(self.outcome.last_event_seq, seq)
            kind = ev.get("type")
            # Outcome markers are noted even when already ingested: a restarted worker must still see them.
            if kind == "started":
                self.outcome.started = ev
            elif kind == "finished":
                self.outcome.finished = True
            elif kind == "stopped":
                self.outcome.stopped = ev
            elif kind == "failed":
                self.outcome.failed = ev
            if seq <= self.ingested_seq:
                continue
            top = max(top, seq)
            if kind == "metric":
                name, value, step = ev.get("name"), _finite(ev.get("value")), ev.get("step")
                if not isinstance(name, str) or value is None or not isinstance(step, int):
                    continue
                if step <= max_step.get(name, -1):
                    continue  # a resumed attempt replaying steps we already hold
                max_step[name] = step
                points.append(
                    {
                        "job_id": self.job_id,
                        "seq": seq,
                        "step": step,
                        "name": name[:200],
                        "value": value,
                        "time": float(ev.get("time", 0.0)),
                    }
                )
                if name == "train/loss":
                    progress["latest_loss"] = value
            elif kind == "progress":
                for key in ("step", "total_steps", "epoch", "samples"):
                    if isinstance(ev.get(key), int):
                        progress[key] = ev[key]
                for key in ("samples_per_s", "eta_s"):
                    if key in ev:
                        progress[key] = _finite(ev[key])
            elif kind == "started":
                if isinstance(ev.get("total_steps"), int):
                    progress["total_steps"] = ev["total_steps"]
                if isinstance(ev.get("start_step"), int):
                    progress["step"] = ev["start_step"]
            elif kind == "checkpoint" and isinstance(ev.get("path"), str):
                row = {
                    "job_id": self.job_id, "step": int(ev.get("step", 0)), "epoch": ev.get("epoch"),
                    "path": ev["path"], "bytes": int(ev.get("bytes", 0)), "sha256": str(ev.get("sha256", ""))[:64],
                    "created_at": utcnow(),
                }  # fmt: skip
                ckpts.append(row)
                self.outcome.checkpoints.append(row)
        if top == self.ingested_seq and not progress:
            return 0
        with self.engine.begin() as conn:
            if points:
                self._insert_points(conn, points)
            if ckpts:
                conn.execute(self._ckpts, ckpts)
                self._forget_deleted_checkpoints(conn)
            jobs.record_ingested(conn, self.job_id, top, progress)
        self.ingested_seq = top
        self.max_step = max_step
        self.outcome.points += len(points)
        return len(points)

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
