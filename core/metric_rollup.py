"""Fast min/max downsampling of metric series through a pyramid of rollups.

A million-point series cannot be scanned in 150 ms (SQLite needs ~300 ms just to GROUP BY it),
so the points are summarised once into `metric_rollups`: for each width in WIDTHS (steps) and each
aligned bucket, the count and the min and max values with the steps where they occur. A query
picks the coarsest width not wider than the output bucket, reads at most ~16 summary rows per
output bucket, and summarises raw points (in SQL) only at the two ragged ends of the range. Every
output bucket keeps its min and its max point, so a one-step spike survives any max_points.

`refresh(session, job_id)` folds the points ingested since the job's mark into the rollups. The
metrics route calls it before reading; the worker may call it after each ingest batch to keep
reads cheap. Folding is SQL (GROUP BY per bucket; each extreme's step found by an index range
scan of its bucket), never a pass over the points in Python. It assumes a job's points are
committed in seq order (one ingester per job, as worker/ingest.py does), so everything at or
below the mark is final. Non-finite values (a diverged loss) are not plotted.

Points from another source than events.jsonl (a script's TensorBoard files) have seqs of their own,
from EXTERNAL_SEQ_BASE up: the mark never covers them (events.jsonl may still add lower seqs after
them); their writer folds each batch in the transaction that inserts it (`fold`).
"""

from __future__ import annotations

import math
import sqlite3
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from sqlalchemy import CursorResult, text
from sqlalchemy.exc import OperationalError
from sqlmodel import Session

WIDTHS = (16, 256, 4096, 65536)
EXTERNAL_SEQ_BASE = 1 << 62  # seqs of points not from events.jsonl (worker/tensorboard.py) start here


@dataclass
class Summary:
    """Count, min and max (with their steps) of some points."""

    n: int = 0
    min_value: float = math.inf
    min_step: int = 0
    max_value: float = -math.inf
    max_step: int = 0

    def merge(self, other: Summary) -> None:
        self.n += other.n
        if other.min_value < self.min_value:
            self.min_value, self.min_step = other.min_value, other.min_step
        if other.max_value > self.max_value:
            self.max_value, self.max_step = other.max_value, other.max_step

    def points(self) -> list[tuple[int, float]]:
        if self.n == 0 or self.min_value == math.inf:
            return []
        if (self.min_step, self.min_value) == (self.max_step, self.max_value):
            return [(self.min_step, self.min_value)]
        return sorted([(self.min_step, self.min_value), (self.max_step, self.max_value)])


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _floor_div(expr: str, width: int | str) -> str:
    """SQL floor division by a positive constant (SQL's `/` truncates toward zero for negatives)."""
    return f"(({expr}) - ((({expr}) % {width}) + {width}) % {width}) / {width}"


_MERGE = """
    ON CONFLICT (job_id, name, width, bucket) DO UPDATE SET
      n = metric_rollups.n + excluded.n,
      min_value = CASE WHEN excluded.min_value < metric_rollups.min_value
                       THEN excluded.min_value ELSE metric_rollups.min_value END,
      min_step = CASE WHEN excluded.min_value < metric_rollups.min_value
                      THEN excluded.min_step ELSE metric_rollups.min_step END,
      max_value = CASE WHEN excluded.max_value > metric_rollups.max_value
                       THEN excluded.max_value ELSE metric_rollups.max_value END,
      max_step = CASE WHEN excluded.max_value > metric_rollups.max_value
                      THEN excluded.max_step ELSE metric_rollups.max_step END
"""
_REPLACE = """
    ON CONFLICT (job_id, name, width, bucket) DO UPDATE SET
      n = excluded.n, min_value = excluded.min_value, min_step = excluded.min_step,
      max_value = excluded.max_value, max_step = excluded.max_step
"""


def _fold_finest_sql() -> str:
    """Points with seq in (old, new] → finest-width summaries, merged into what is there."""
    w = WIDTHS[0]
    bucket = _floor_div("step", w)

    def step_of(agg: str) -> str:
        # The (earliest) step holding the bucket's extreme value: an index range scan of ≤ w points.
        return (
            "(SELECT p.step FROM metric_points p WHERE p.job_id = :j AND p.name = g.name "
            f"AND p.step >= g.b * {w} AND p.step < g.b * {w} + {w} AND p.seq > :old AND p.seq <= :new "
            f"AND p.value = g.{agg} ORDER BY p.step LIMIT 1)"
        )

    return f"""
    INSERT INTO metric_rollups (job_id, name, width, bucket, n, min_value, min_step, max_value, max_step)
    SELECT :j, g.name, {w}, g.b, g.n, g.mn, {step_of("mn")}, g.mx, {step_of("mx")}
    FROM (SELECT name, {bucket} AS b, count(*) AS n, min(value) AS mn, max(value) AS mx
          FROM metric_points
          WHERE job_id = :j AND seq > :old AND seq <= :new AND value >= :lowest AND value <= :highest
          GROUP BY name, {bucket}) AS g
    WHERE true
    {_MERGE}
    """


def _rebuild_level_sql(width: int, finer: int) -> str:
    """Recompute the `width` buckets in [:b0, :b1] of one series from the next finer level (replacing them).

    The bounds are cast to BIGINT: PostgreSQL binds a small Python int as int4, and int4 × int4 overflows
    for steps past ~2^31 / width (a system sample's step is its unix time in milliseconds)."""
    bucket = _floor_div("bucket", width // finer)

    def step_of(col: str, agg: str) -> str:
        return (
            f"(SELECT f.{col}_step FROM metric_rollups f WHERE f.job_id = :j AND f.name = :n AND f.width = {finer} "
            f"AND f.bucket >= g.b * {width // finer} AND f.bucket < (g.b + 1) * {width // finer} "
            f"AND f.{col}_value = g.{agg} ORDER BY f.bucket LIMIT 1)"
        )

    return f"""
    INSERT INTO metric_rollups (job_id, name, width, bucket, n, min_value, min_step, max_value, max_step)
    SELECT :j, :n, {width}, g.b, g.n, g.mn, {step_of("min", "mn")}, g.mx, {step_of("max", "mx")}
    FROM (SELECT {bucket} AS b, sum(n) AS n, min(min_value) AS mn, max(max_value) AS mx
          FROM metric_rollups
          WHERE job_id = :j AND name = :n AND width = {finer}
            AND bucket >= CAST(:b0 AS BIGINT) * {width // finer}
            AND bucket < (CAST(:b1 AS BIGINT) + 1) * {width // finer}
          GROUP BY {bucket}) AS g
    WHERE true
    {_REPLACE}
    """


_FINEST = text(_fold_finest_sql())
_LEVELS = [(w, text(_rebuild_level_sql(w, f))) for f, w in zip(WIDTHS, WIDTHS[1:], strict=False)]


def refresh(session: Session, job_id: int) -> int:
    """Fold the job's points past its mark into the rollups and commit; returns how many points were new.

    On SQLite, a refresh that cannot get the write lock within the busy timeout (a machine so loaded that
    the ingester and other refreshers kept it) folds nothing and returns 0: the mark did not move, so the
    next refresh folds those points; a chart read meanwhile is a few points behind, never wrong."""
    try:
        return _refresh(session, job_id)
    except OperationalError as exc:
        if not _sqlite_busy(exc):
            raise
        session.rollback()
        return 0


def _sqlite_busy(exc: OperationalError) -> bool:
    return isinstance(exc.orig, sqlite3.OperationalError) and "locked" in str(exc.orig)


def _refresh(session: Session, job_id: int) -> int:
    """`refresh`, which see.

    All in SQL: the new points are grouped into finest buckets (merged into existing ones), then
    each coarser level's buckets that the new points touch are recomputed from the level below.
    Safe to run concurrently: the mark moves with a conditional UPDATE, so of two refreshers of the
    same job one folds and the other finds nothing to do.
    """
    # Reads first, outside any write transaction (SQLite: a read transaction that later upgrades to
    # a write can fail with SQLITE_BUSY_SNAPSHOT, which the busy timeout does not retry).
    mark = session.execute(text("SELECT seq FROM metric_rollup_marks WHERE job_id = :j"), {"j": job_id}).scalar()
    newest = session.execute(
        text("SELECT max(seq) FROM metric_points WHERE job_id = :j AND seq < :base"),
        {"j": job_id, "base": EXTERNAL_SEQ_BASE},
    ).scalar()
    session.commit()
    if newest is None:
        return 0
    if mark is None:
        session.execute(
            text("INSERT INTO metric_rollup_marks (job_id, seq) VALUES (:j, -1) ON CONFLICT (job_id) DO NOTHING"),
            {"j": job_id},
        )
        session.commit()
        mark = session.execute(
            text("SELECT seq FROM metric_rollup_marks WHERE job_id = :j"), {"j": job_id}
        ).scalar_one()  # the row exists now: inserted just above, or by a concurrent folder
        session.commit()
    if newest <= mark:
        return 0
    moved = cast(
        "CursorResult[Any]",  # what an UPDATE returns (Session.execute is typed as the general Result)
        session.execute(
            text("UPDATE metric_rollup_marks SET seq = :new WHERE job_id = :j AND seq = :old"),
            {"new": newest, "old": mark, "j": job_id},
        ),
    )
    if moved.rowcount != 1:
        session.rollback()
        return 0
    folded = fold(session, job_id, mark, newest)
    session.commit()
    return folded


def fold(conn: Any, job_id: int, old: int, new: int) -> int:
    """Fold the job's points with seq in (old, new] into the rollups, in the caller's transaction (a
    Session or a Connection); returns how many points that was. `refresh` moves the mark first; the
    writer of external points (EXTERNAL_SEQ_BASE) calls it with the seqs it just inserted."""
    window = {"j": job_id, "old": old, "new": new}
    spans = conn.execute(
        text(
            "SELECT name, count(*), min(step), max(step) FROM metric_points "
            "WHERE job_id = :j AND seq > :old AND seq <= :new GROUP BY name"
        ),
        window,
    ).all()
    conn.execute(_FINEST, {**window, "lowest": -sys.float_info.max, "highest": sys.float_info.max})
    for name, _, lo, hi in spans:
        for width, statement in _LEVELS:
            conn.execute(statement, {"j": job_id, "n": name, "b0": lo // width, "b1": hi // width})
    return sum(count for _, count, _, _ in spans)


@dataclass
class Series:
    name: str
    points: list[tuple[int, float]] = field(default_factory=list)
    total_points: int = 0
    downsampled: bool = False


def series_names(session: Session, job_id: int) -> list[str]:
    """Names of the job's series (from the coarsest rollup: a few rows, not a scan of the points)."""
    rows = session.execute(
        text("SELECT DISTINCT name FROM metric_rollups WHERE job_id = :j AND width = :w ORDER BY name"),
        {"j": job_id, "w": WIDTHS[-1]},
    )
    return [r[0] for r in rows]


def _range_clause(start_step: int | None, end_step: int | None) -> str:
    clause = ""
    if start_step is not None:
        clause += " AND step >= :start"
    if end_step is not None:
        clause += " AND step <= :end"
    return clause


def _raw(session: Session, params: dict, lo: int, hi: int) -> Iterable[tuple[int, float]]:
    rows = session.execute(
        text(
            "SELECT step, value FROM metric_points "
            "WHERE job_id = :j AND name = :n AND step >= :lo AND step <= :hi ORDER BY step, seq"
        ),
        {**params, "lo": lo, "hi": hi},
    )
    return ((s, v) for s, v in rows if _finite(v))


_BUCKETS_SQL = text(f"""
    SELECT g.b, g.n, g.mn,
      (SELECT p.step FROM metric_points p WHERE p.job_id = :j AND p.name = :n AND p.step >= :lo AND p.step <= :hi
         AND p.step >= g.b * :w AND p.step < g.b * :w + :w AND p.value = g.mn ORDER BY p.step LIMIT 1),
      g.mx,
      (SELECT p.step FROM metric_points p WHERE p.job_id = :j AND p.name = :n AND p.step >= :lo AND p.step <= :hi
         AND p.step >= g.b * :w AND p.step < g.b * :w + :w AND p.value = g.mx ORDER BY p.step LIMIT 1)
    FROM (SELECT {_floor_div("step", ":w")} AS b, count(*) AS n, min(value) AS mn, max(value) AS mx
          FROM metric_points
          WHERE job_id = :j AND name = :n AND step >= :lo AND step <= :hi AND value >= :lowest AND value <= :highest
          GROUP BY {_floor_div("step", ":w")}) AS g
""")


def _sql_buckets(session: Session, job_id: int, name: str, lo: int, hi: int, width: int) -> list[tuple[int, Summary]]:
    """Min/max summaries of the raw points in [lo, hi], per bucket of `width` steps, computed in SQL."""
    if hi < lo:
        return []
    rows = session.execute(
        _BUCKETS_SQL,
        {
            "j": job_id,
            "n": name,
            "lo": lo,
            "hi": hi,
            "w": width,
            "lowest": -sys.float_info.max,
            "highest": sys.float_info.max,
        },
    )
    return [(b, Summary(n, mn, mn_s, mx, mx_s)) for b, n, mn, mn_s, mx, mx_s in rows]


def _rolled_up(session: Session, job_id: int, name: str, first: int, last: int) -> int:
    """How many points the finest rollup buckets wholly inside [first, last] summarised. More than the raw
    points there means the series was thinned (core/retention.py): it is charted from the rollups, as
    before thinning, never from the few points kept. (Never more for a series that was not.)"""
    w = WIDTHS[0]
    return session.execute(
        text(
            "SELECT coalesce(sum(n), 0) FROM metric_rollups WHERE job_id = :j AND name = :n AND width = :w"
            " AND bucket >= :k0 AND bucket <= :k1"
        ),
        {"j": job_id, "n": name, "w": w, "k0": -(-first // w), "k1": (last + 1) // w - 1},
    ).scalar_one()


def query(
    session: Session,
    job_id: int,
    name: str,
    max_points: int,
    start_step: int | None = None,
    end_step: int | None = None,
) -> Series:
    """The series `name` of a job, at most `max_points` points; each bucket keeps its min and max."""
    base = {"j": job_id, "n": name, "start": start_step, "end": end_step}
    rng = _range_clause(start_step, end_step)
    first = session.execute(
        text(f"SELECT step FROM metric_points WHERE job_id = :j AND name = :n{rng} ORDER BY step LIMIT 1"), base
    ).scalar()
    last = session.execute(
        text(f"SELECT step FROM metric_points WHERE job_id = :j AND name = :n{rng} ORDER BY step DESC LIMIT 1"), base
    ).scalar()
    if first is None or last is None:
        return Series(name)
    # Few enough points? Counting stops at max_points + 1, so this is cheap even for a huge series.
    few = session.execute(
        text(
            f"SELECT count(*) FROM (SELECT 1 FROM metric_points WHERE job_id = :j AND name = :n{rng} LIMIT :cap) AS t"
        ),
        {**base, "cap": max_points + 1},
    ).scalar_one()
    if few <= max_points and _rolled_up(session, job_id, name, first, last) <= max_points:
        points = list(_raw(session, base, first, last))
        return Series(name, points, total_points=few)

    # Output buckets: at most max_points // 2 - 2 of them (alignment can add two), 2 points each.
    n_buckets = max(1, max_points // 2 - 2)
    want = -(-(last - first + 1) // n_buckets)
    usable = [w for w in WIDTHS if w <= want]
    width = usable[-1] if usable else 1
    out_width = -(-want // width) * width  # a multiple of `width`: rollup buckets never straddle two outputs
    buckets: dict[int, Summary] = {}

    def merge(rows: Iterable[tuple[int, Summary]]) -> None:
        for key, summary in rows:
            buckets.setdefault(key, Summary()).merge(summary)

    k0 = -(-first // width)  # first rollup bucket wholly inside [first, last]
    k1 = (last + 1) // width - 1  # last one
    if width == 1 or k0 > k1:
        merge(_sql_buckets(session, job_id, name, first, last, out_width))
    else:
        merge(_sql_buckets(session, job_id, name, first, k0 * width - 1, out_width))  # ragged start
        rows = session.execute(
            text(
                "SELECT bucket, n, min_value, min_step, max_value, max_step FROM metric_rollups "
                "WHERE job_id = :j AND name = :n AND width = :w AND bucket >= :k0 AND bucket <= :k1"
            ),
            {"j": job_id, "n": name, "w": width, "k0": k0, "k1": k1},
        )
        merge((bucket * width // out_width, Summary(n, mn, mn_s, mx, mx_s)) for bucket, n, mn, mn_s, mx, mx_s in rows)
        merge(_sql_buckets(session, job_id, name, (k1 + 1) * width, last, out_width))  # ragged end
    points: list[tuple[int, float]] = []
    for key in sorted(buckets):
        points.extend(buckets[key].points())
    total = sum(s.n for s in buckets.values())
    return Series(name, points, total_points=total, downsampled=True)
