"""PostgreSQL's bulk path for metric points (worker/ingest.py uses it from COPY_THRESHOLD points on): a binary
COPY straight into metric_points, open while the batch's events are still being read, the foreign key checked
once per batch where this role may, and the ON CONFLICT way when another ingester got there first."""

from __future__ import annotations

from typing import Any

from worker.ingest_handlers import POINT_COLUMNS, Point

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


class PointStream:
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

    def __enter__(self) -> PointStream:
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


def copy_points(conn: Any, job_id: int, points: list[Point]) -> None:
    """`points` (all of job `job_id`) into metric_points, in the caller's transaction."""
    with PointStream(conn, job_id, points):
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
