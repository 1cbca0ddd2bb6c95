"""Reading rank 0's events.jsonl as it grows and writing it to the database in batches.

Idempotent on (job, seq): points insert with ON CONFLICT DO NOTHING (PostgreSQL: a COPY, which the
unique (job, seq) index turns back to that path when any of its rows is there already) and the job
row remembers the last seq ingested, so a restarted worker re-reads the file without duplicating anything. A resumed
attempt replays the steps after its checkpoint; those points already exist (same name and step)
and are skipped, so a curve has no duplicate and no hole.
"""

from __future__ import annotations

import json
import json.scanner
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine
from sqlmodel import Session, col

from core import jobs, metric_rollup, run_files
from core.tables import Checkpoint, Job, MetricPoint, utcnow
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

log = logging.getLogger("rankzero.worker")

BATCH = 20_000  # events per transaction
COPY_THRESHOLD = 500  # PostgreSQL: from this many points on, COPY beats INSERT … VALUES
STREAM_EVERY = 1_000  # PostgreSQL: events handled between two hand-overs of their points to the open COPY


MAX_EVENT_LINE = 1 << 20  # bytes of one pending events.jsonl line the worker holds at most

# json.loads spends most of its time per line around the C scanner (detecting the encoding, decoding,
# the Python wrappers): a line that is plain UTF-8 JSON goes to the scanner directly (about half the
# parse time; bench/service.py), and any other line to json.loads, whose rules (a BOM, UTF-16, its
# errors) stay the only ones.
# (typeshed types the C scanner's argument as a scanner; CPython's own json.decoder passes the decoder)
_scan_json = json.scanner.make_scanner(json.JSONDecoder())  # pyright: ignore[reportArgumentType]
_JSON_SPACE = " \t\r"  # JSON's whitespace, bar the newline that ended the line


def parse_line(line: bytes) -> Any:
    """The JSON value on one line of events.jsonl, as `json.loads(line)` reads it (ValueError when it is not)."""
    try:
        text = line.decode("utf-8", "surrogatepass").strip(_JSON_SPACE)
        value, end = _scan_json(text, 0)
        if end == len(text):
            return value
    except (ValueError, StopIteration):  # not plain UTF-8 JSON: json.loads says what it is
        pass
    return json.loads(line)


class EventTail:
    """Complete lines appended to a file since the last call (a partial last line waits)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self._partial = b""
        self.skipping = False  # inside an overlong line: the bytes up to its newline are dropped
        self.overlong_lines = 0

    def read(self, max_bytes: int = 8 << 20) -> list[dict[str, Any]]:
        try:
            with run_files.open_file(self.path, "rb", self.path.parent) as fh:  # a link the job made: not read
                fh.seek(self.offset)
                chunk = fh.read(max_bytes)
        except FileNotFoundError:
            return []
        except run_files.LinkRefused:
            log.warning("%s is a link or not a regular file: not read (the job made it)", self.path)
            return []
        self.offset += len(chunk)
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()
        if self.skipping and lines:  # the rest of a dropped line ends here
            lines[0], self.skipping = b"", False
        if len(self._partial) > MAX_EVENT_LINE:
            # A line that never ends would grow the worker, not the job: drop it, and what follows up to its
            # newline (a real event is a few hundred bytes; the trainer's largest, `failed`, a few KiB).
            self.overlong_lines += 0 if self.skipping else 1
            self._partial, self.skipping = b"", True
        events = []
        for line in lines:
            if not line.strip():
                continue
            try:
                event = parse_line(line)
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
class _Batch:
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

    def admit(self, batch: _Batch, name: str) -> bool:
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


def _insert(engine: Engine, table: Any) -> Any:
    dialect = postgresql if engine.dialect.name == "postgresql" else sqlite
    return dialect.insert(table)


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


class _MetricLine(Envelope, Metric):
    pass


class _CheckpointLine(Envelope, CheckpointSaved):
    pass


class TimedMetric(Metric):
    """A metric from another source than events.jsonl (`Ingestor.ingest_metrics`): no seq of its own yet."""

    time: float
    type: str  # EventType.metric's value


def _ignore(_target: Any, _ev: Any) -> None:
    pass


@dataclass(frozen=True)
class _Handler:
    # Any: each handler takes its own TypedDict; the table below pairs it with its EventType.
    note: Callable[[EventsSeen, Any], None] = _ignore
    write: Callable[[_Batch, Any], None] = _ignore


def _note_started(seen: EventsSeen, ev: Started) -> None:
    seen.started = ev


def _note_finished(seen: EventsSeen, _ev: Finished) -> None:
    seen.finished = True


def _note_stopped(seen: EventsSeen, ev: Stopped) -> None:
    seen.stopped = ev


def _note_failed(seen: EventsSeen, ev: Failed) -> None:
    seen.failed = ev


def _write_started(batch: _Batch, ev: Started) -> None:
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


def _write_progress(batch: _Batch, ev: Progress) -> None:
    batch.progress_reported = True
    fields: JobProgress = ev  # the part of a progress event a job row keeps
    for key in PROGRESS_COUNTS:
        if (count := _count(fields.get(key))) is not None:
            batch.progress[key] = count
    for key in PROGRESS_RATES:
        if key in fields:
            batch.progress[key] = _finite(fields.get(key))


def _write_metric(batch: _Batch, ev: _MetricLine) -> None:
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


def _write_checkpoint(batch: _Batch, ev: _CheckpointLine) -> None:
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


# --- PostgreSQL's bulk path ---------------------------------------------------------------------
# Measured on the shared 2-core VM (200,000 points in batches of 20,000; machine load varies, so ratios
# within one run): COPY into a temporary table + INSERT … SELECT … ON CONFLICT DO NOTHING, every row's
# foreign key checked (the first version) 51k rows/s; a COPY straight into metric_points 85k; that COPY
# with the foreign key checked once per batch 136k. With the leaner per-event Python path,
# bench/service.py --baseline: 136k vs 53k points/s (×2.6). So: COPY straight in (a batch only holds
# seqs past the job's ingested_seq, which commits with its points, so none can be there yet — unless
# another ingester of the same job raced us: then the unique index refuses the COPY and the batch goes
# the ON CONFLICT way instead), and the foreign key checked once (below) where this role may do that.
# Issue 29: the COPY in binary, each value dumped by psycopg's C dumpers (0.3 µs a point on the client
# against 2.1 for text rows; the server's share, ~5 µs, is its heap and three indexes either way).

_COPY_POINTS = f"COPY metric_points ({', '.join(POINT_COLUMNS)}) FROM STDIN"
# A binary COPY must send each column in its own type's format: psycopg's dumper for each SQL type of
# POINT_COLUMNS, read from the catalogue (a type not listed here: the text COPY, which the server parses).
_BINARY_DUMPER = {"integer": "int4", "bigint": "int8", "character varying": "text", "text": "text",
                  "double precision": "float8"}  # fmt: skip
_COLUMN_TYPES = """
SELECT attname, format_type(atttypid, NULL) FROM pg_attribute
 WHERE attrelid = 'metric_points'::regclass AND attnum > 0 AND NOT attisdropped
"""
_binary_types: dict[str, list[str] | None] = {}  # by database URL: read once per process


def _point_types(cur: Any, url: str) -> list[str] | None:
    """psycopg's binary dumpers for POINT_COLUMNS in this database (None: some type has none here)."""
    if url not in _binary_types:
        cur.execute(_COLUMN_TYPES)
        sql_types = dict(cur.fetchall())
        dumpers = [_BINARY_DUMPER.get(sql_types.get(c, "")) for c in POINT_COLUMNS]
        _binary_types[url] = [d for d in dumpers if d] if all(dumpers) else None
    return _binary_types[url]


def _copy_rows(cur: Any, statement: str, types: list[str] | None, points: list[Point]) -> None:
    """One COPY of `points` (binary when `types` names each column's dumper, else text)."""
    with cur.copy(statement + " (FORMAT BINARY)" if types else statement) as copy:
        if types:
            copy.set_types(types)
        for p in points:
            copy.write_row(p)


# True where metric_points' only triggers are its foreign key to jobs (on job_id) and it has no rule:
# then switching triggers off for the COPY skips nothing but that check, which `_lock_job` does once.
_ONLY_THE_JOB_FK = """
SELECT current_setting('is_superuser') = 'on'
   AND NOT EXISTS (SELECT 1 FROM pg_rules WHERE tablename = 'metric_points')
   AND (SELECT count(*) FROM pg_constraint
         WHERE conrelid = 'metric_points'::regclass AND contype = 'f') = 1
   AND EXISTS (SELECT 1 FROM pg_constraint c JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = ALL(c.conkey)
                WHERE c.conrelid = 'metric_points'::regclass AND c.contype = 'f'
                  AND c.confrelid = 'jobs'::regclass AND a.attname = 'job_id' AND cardinality(c.conkey) = 1)
   AND NOT EXISTS (SELECT 1 FROM pg_trigger t
                    WHERE t.tgrelid = 'metric_points'::regclass
                      AND NOT (t.tgisinternal AND t.tgconstraint IN (
                          SELECT oid FROM pg_constraint WHERE conrelid = 'metric_points'::regclass AND contype = 'f')))
"""
_fk_once_ok: dict[str, bool] = {}  # by database URL: decided once per process


def _fk_once_allowed(cur: Any, url: str) -> bool:
    if url not in _fk_once_ok:
        cur.execute(_ONLY_THE_JOB_FK)
        _fk_once_ok[url] = bool(cur.fetchone()[0])
    return _fk_once_ok[url]


def _lock_job(cur: Any, job_id: int) -> bool:
    """What the foreign key's check does for each row, once: the job exists, and it stays (KEY SHARE
    blocks its deletion, and any change of its id, until this transaction ends)."""
    cur.execute("SELECT 1 FROM jobs WHERE id = %s FOR KEY SHARE", (job_id,))
    return cur.fetchone() is not None


class _PointStream:
    """One COPY of a job's points into metric_points, open while the batch's events are still being read
    (`send` hands over the points appended to `points` since the last call), in the caller's transaction.

    Why open early (issue 29): the server's share of a point (~5 µs: heap, three indexes) is most of its
    cost; rows sent while the handlers build the rest are written by the server meanwhile, instead of
    after the whole batch is built. Closing it (`with`'s end) finishes the COPY; when the unique (job, seq)
    index refused it (another ingester got there first), the savepoint goes and the whole of `points`
    goes the ON CONFLICT way. An exception inside the block aborts the COPY, and the caller's transaction
    rolls back with its offset: nothing of the batch stays."""

    def __init__(self, conn: Any, job_id: int, points: list[Point]) -> None:
        self.conn, self.job_id, self.points, self.sent = conn, job_id, points, 0

    def __enter__(self) -> _PointStream:
        conn = self.conn
        self.cur = cur = conn.connection.dbapi_connection.cursor()
        url = str(conn.engine.url)
        # events.jsonl is the durable copy: a batch lost in a server crash is lost together with
        # its ingested_seq (same transaction) and simply re-read, so the commit need not wait for fsync.
        cur.execute("SET LOCAL synchronous_commit TO OFF")
        self.nested = conn.begin_nested()
        # No job row (deleted): no shortcut, and the COPY's own check refuses the points as before.
        self.fk_once = _fk_once_allowed(cur, url) and _lock_job(cur, self.job_id)
        if self.fk_once:
            cur.execute("SET LOCAL session_replication_role = replica")  # triggers off: the FK checked above
        types = _point_types(cur, url)
        self._copying = cur.copy(_COPY_POINTS + " (FORMAT BINARY)" if types else _COPY_POINTS)
        self.copy = self._copying.__enter__()
        if types:
            self.copy.set_types(types)
        return self

    def send(self) -> None:
        write_row, points = self.copy.write_row, self.points
        for i in range(self.sent, len(points)):
            write_row(points[i])
        self.sent = len(points)

    def __exit__(self, kind: Any, error: Any, tb: Any) -> None:
        from psycopg.errors import UniqueViolation

        try:
            if kind is not None:
                self._copying.__exit__(kind, error, tb)  # the COPY aborted; the caller's exception goes on
                return
            self.send()
            try:
                self._copying.__exit__(None, None, None)
                if self.fk_once:
                    self.cur.execute("SET LOCAL session_replication_role = origin")
            except UniqueViolation:  # some of these seqs are there already (another ingester): skip those
                self.nested.rollback()  # (the role goes back with it)
                _copy_via_temp(self.cur, self.points)
            else:
                self.nested.commit()
        finally:
            self.cur.close()


def _pg_copy_points(conn: Any, job_id: int, points: list[Point]) -> None:
    """`points` (all of job `job_id`) into metric_points, in the caller's transaction."""
    with _PointStream(conn, job_id, points):
        pass  # all of them are sent at the end


_TEMP_TYPES = ["int8", "int8", "int8", "text", "float8", "float8"]  # rz_points_in's columns, below


def _copy_via_temp(cur: Any, points: list[Point]) -> None:
    """COPY into a temporary table, then one INSERT … SELECT … ON CONFLICT DO NOTHING (COPY itself
    cannot skip duplicates); every row's foreign key checked."""
    cur.execute(
        "CREATE TEMP TABLE IF NOT EXISTS rz_points_in (job_id bigint, seq bigint, step bigint, name text, "
        "value double precision, time double precision) ON COMMIT DELETE ROWS"
    )
    _copy_rows(cur, f"COPY rz_points_in ({', '.join(POINT_COLUMNS)}) FROM STDIN", _TEMP_TYPES, points)
    cur.execute(
        f"INSERT INTO metric_points ({', '.join(POINT_COLUMNS)}) SELECT {', '.join(POINT_COLUMNS)} FROM rz_points_in "
        "ON CONFLICT (job_id, seq) DO NOTHING"
    )


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
            rows = s.execute(
                select(col(MetricPoint.name), func.max(col(MetricPoint.step)), func.count())
                .where(col(MetricPoint.job_id) == job_id)
                .group_by(col(MetricPoint.name))
            ).all()
        self.max_step: dict[str, int] = {name: int(step) for name, step, _ in rows}
        self.progress_reported = False  # see `_step_from_metrics`
        self.metric_step = step_from_metrics(self.max_step) or 0  # the step the metrics gave last
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
            line: _MetricLine = {**ev, "seq": seq}
            _write_metric(batch, line)
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

    def _step_from_metrics(self, batch: _Batch) -> None:
        """Without `progress` events (ever, in this ingestor's life), the job's step is its metrics' newest:
        `rankzero.progress`, else `rankzero.log`, else TensorBoard (else the console feed's counter)."""
        self.progress_reported = self.progress_reported or batch.progress_reported
        if self.progress_reported or "step" in batch.progress:
            return
        step = step_from_metrics(batch.max_step)
        if step is not None and step > self.metric_step:
            batch.progress["step"] = step

    def _new_batch(self, progress: dict[str, Any] | None = None) -> _Batch:
        counts = dict(self.counts) if self.caps is not None else {}
        return _Batch(job_id=self.job_id, seen=self.seen, max_step=dict(self.max_step), progress=dict(progress or {}),
                      caps=self.caps, counts=counts)  # fmt: skip

    def _kept(self, batch: _Batch) -> None:
        """A batch committed: keep what it learnt, and say on the job's timeline when the caps dropped points."""
        self.max_step = batch.max_step
        self.counts = batch.counts
        self.metric_step = max(self.metric_step, step_from_metrics(batch.max_step) or 0)
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

    def _handle(self, events: list[Event], batch: _Batch, send: Callable[[], None] | None = None) -> int:
        """Each event to its handlers, into `batch`; returns the highest seq ingested with it. `send`: called
        every STREAM_EVERY events, to hand the points built so far to an open COPY (`_stream_batch`)."""
        seen, done = self.seen, self.ingested_seq
        top, last = done, seen.last_event_seq
        for i, ev in enumerate(events):  # per event of a burst of 100,000s: plain comparisons, no call to skip
            seq = ev["seq"]
            if seq > last:
                last = seq
            handler = _handler_for(ev.get("type"))
            if handler.note is not _ignore:
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

    def _stream_batch(self, events: list[Event], batch: _Batch) -> int:
        """PostgreSQL, a large batch: its points COPYed while its events are read, then the rest of the batch's
        rows and the offset, all in one transaction (nothing new: the empty COPY commits, the offset stays)."""
        with self.engine.begin() as conn:
            with _PointStream(conn, self.job_id, batch.points) as stream:
                top = self._handle(events, batch, stream.send)
            if top != self.ingested_seq or batch.progress:
                self._write_rows(conn, batch, top)
        return top

    def _write(self, batch: _Batch, top: int) -> None:
        """The batch's rows and the job's progress up to seq `top`, in one transaction."""
        with self.engine.begin() as conn:
            if batch.points:
                self._insert_points(conn, batch.points)
            self._write_rows(conn, batch, top)

    def _write_rows(self, conn: Any, batch: _Batch, top: int) -> None:
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
            _pg_copy_points(conn, self.job_id, points)

    def _forget_deleted_checkpoints(self, conn: Any) -> None:
        """keep_last makes the trainer delete old files; their rows go too, so every listed one downloads."""
        if self.run_root is None:
            return
        ckpts = select(col(Checkpoint.id), col(Checkpoint.path)).where(col(Checkpoint.job_id) == self.job_id)
        rows = conn.execute(ckpts).all()
        gone = [cid for cid, path in rows if not (self.run_root / path).is_file()]
        if gone:
            conn.execute(delete(Checkpoint).where(Checkpoint.id.in_(gone)))  # type: ignore[attr-defined]
