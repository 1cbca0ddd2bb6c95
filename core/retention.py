"""Data that does not grow for ever (issue 42): the retention pass thins old jobs' metric points and trims
their rank logs; the scheduler leader runs it every RANKZERO_RETENTION_INTERVAL_S (`run_due`).

Metric points. A job that ended more than RANKZERO_RETENTION_METRICS_AFTER_DAYS ago keeps, of each series,
its first and last point and, in every 16-step bucket (the finest rollup width), the points holding the
bucket's min and its max: exactly the points `core/metric_rollup.py` picks, so its rollups stay whole and
a chart at a resolution of 16 steps or coarser (a series longer than 8 × its max_points: every chart of a
long run) draws the same points after thinning as before. Zoomed in past 16 steps a point, the chart
shows the kept extremes only. About 1/8 of a dense series remains. Non-finite values, never plotted, go.

Rank logs (`<run>/logs/`, torchrun's per-rank stdout/stderr): a job that ended more than
RANKZERO_RETENTION_LOGS_AFTER_DAYS ago keeps the last RANKZERO_RETENTION_LOG_TAIL_KB of each, where the run
dir is on this host's runs storage. events.jsonl is left whole: it is the source of the exactly-once
ingest (re-read from the start after a crash), and it goes with the run dir when the job is deleted.

Each job's thinning and trimming is recorded in the audit log (actor "system", `retention.metrics` /
`retention.logs`, target "job N"), which is also how the pass knows a job is done: no schema of its own.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from sqlalchemy import DateTime, bindparam, text
from sqlmodel import Session

from core import audit, metric_rollup
from core.db import get_engine
from core.settings import Settings

log = logging.getLogger(__name__)

FINEST = metric_rollup.WIDTHS[0]
METRICS_ACTION = "retention.metrics"
LOGS_ACTION = "retention.logs"
JOBS_PER_PASS = 50
# Work a pass does before it hands the leader back to scheduling (checked between jobs); what is left is
# done by the next calls, one per scheduling pass, until none is: a backlog never holds placement up long.
PASS_BUDGET_S = 2.0
WINDOW_STEPS = 1 << 16  # a series is thinned this many steps at a time: one index range of points and rollups
DELETE_BATCH = 1000
_WINDOW_ROLLUPS = text(
    "SELECT min_step, min_value, max_step, max_value FROM metric_rollups"
    " WHERE job_id = :j AND name = :n AND width = :w AND bucket >= :b0 AND bucket < :b1"
)
_WINDOW_POINTS = text(
    "SELECT id, step, value FROM metric_points WHERE job_id = :j AND name = :n AND step >= :s0 AND step < :s1"
)

_NEXT_STEP = text("SELECT min(step) FROM metric_points WHERE job_id = :j AND name = :n AND step >= :s")


@dataclass(frozen=True)
class Due:
    """The pass's cutoffs: jobs that finished before them are old enough (None: that part is off)."""

    metrics_before: datetime | None
    logs_before: datetime | None


def due(settings: Settings, now: datetime) -> Due:
    """The cutoffs of a pass at `now`: jobs that finished before them are old enough (0 days: never)."""

    def cutoff(days: float) -> datetime | None:
        return now - timedelta(days=days) if days > 0 else None

    return Due(cutoff(settings.retention_metrics_after_days), cutoff(settings.retention_logs_after_days))


def log_keep_from(size: int, tail_bytes: int) -> int:
    """Where a trimmed log starts: its last `tail_bytes` (nothing to do, 0, when it is no longer)."""
    return max(0, size - tail_bytes)


def _candidates(session: Session, before: datetime, action: str, limit: int) -> list[int]:
    """Jobs that finished before `before` and were not yet done by `action`, oldest first."""
    query = text(
        "SELECT id FROM jobs WHERE finished_at IS NOT NULL AND finished_at < :before"
        " AND 'job ' || CAST(id AS VARCHAR(20)) NOT IN (SELECT target FROM audit_events WHERE action = :a)"
        " ORDER BY finished_at, id LIMIT :n"
    ).bindparams(bindparam("before", type_=DateTime(timezone=True)))  # SQLite: stored as the column stores it
    rows = session.execute(query, {"before": before, "a": action, "n": limit}).all()
    return [r[0] for r in rows]


def thin_metrics(session: Session, job_id: int) -> tuple[int, int] | None:
    """Thin one job's points (committed, with its audit entry); (points before, points removed), or None
    when its rollups do not yet cover every point (a refresh that could not run: tried again next pass)."""
    metric_rollup.refresh(session, job_id)
    mark = session.execute(text("SELECT seq FROM metric_rollup_marks WHERE job_id = :j"), {"j": job_id}).scalar()
    newest = session.execute(
        text("SELECT max(seq) FROM metric_points WHERE job_id = :j AND seq < :base"),
        {"j": job_id, "base": metric_rollup.EXTERNAL_SEQ_BASE},
    ).scalar()
    if newest is not None and (mark is None or mark < newest):
        session.rollback()
        return None
    spans = session.execute(
        text("SELECT name, count(*), min(step), max(step) FROM metric_points WHERE job_id = :j GROUP BY name"),
        {"j": job_id},
    ).all()
    removed = sum(_thin_series(session, job_id, name, lo, hi) for name, _, lo, hi in spans)
    before = sum(n for _, n, _, _ in spans)
    audit.record_for(session, None, METRICS_ACTION, f"job {job_id}", f"{removed} of {before} raw metric points removed")
    session.commit()
    return before, removed


def _thin_series(session: Session, job_id: int, name: str, lo: int, hi: int) -> int:
    """Delete the series' points between its first and last step that no 16-step bucket holds as its min or
    max, a window of steps at a time: index range scans whose cost does not hang on the planner's statistics
    (a fresh table's, or a huge one's, made a NOT EXISTS join take a minute for 28,000 points)."""
    removed = 0
    window = {"j": job_id, "n": name, "w": FINEST}
    s0: int | None = lo - lo % WINDOW_STEPS
    while s0 is not None and s0 <= hi:
        kept: set[tuple[int, float]] = set()
        for min_step, min_value, max_step, max_value in session.execute(
            _WINDOW_ROLLUPS, {**window, "b0": s0 // FINEST, "b1": (s0 + WINDOW_STEPS) // FINEST}
        ):
            kept.update(((min_step, min_value), (max_step, max_value)))
        points = session.execute(_WINDOW_POINTS, {**window, "s0": s0, "s1": s0 + WINDOW_STEPS}).all()
        doomed = [pid for pid, step, value in points if lo < step < hi and (step, value) not in kept]
        for i in range(0, len(doomed), DELETE_BATCH):
            chunk = doomed[i : i + DELETE_BATCH]
            session.execute(text(f"DELETE FROM metric_points WHERE id IN ({','.join(str(int(x)) for x in chunk)})"))
        removed += len(doomed)
        after = session.execute(_NEXT_STEP, {**window, "s": s0 + WINDOW_STEPS}).scalar()
        s0 = None if after is None else after - after % WINDOW_STEPS  # sparse steps (unix ms): skip the gaps
    return removed


def trim_log(path: Path, tail_bytes: int) -> int:
    """Keep the last `tail_bytes` of the regular file `path` (never followed if a link); bytes removed."""
    fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        start = log_keep_from(info.st_size, tail_bytes) if stat.S_ISREG(info.st_mode) else 0
        if start == 0:
            return 0
        os.lseek(fd, start, os.SEEK_SET)
        tail = os.read(fd, tail_bytes)
        cut = tail.find(b"\n") + 1  # start at a whole line (0: none in the tail, keep it as it is)
        if 0 < cut < len(tail):
            tail, start = tail[cut:], start + cut
        note = f"[rankzero: the first {start} bytes were removed by retention]\n".encode()
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, note + tail)
        os.ftruncate(fd, len(note) + len(tail))
        return start
    finally:
        os.close(fd)


def trim_logs(run_dir: Path, tail_bytes: int) -> int:
    """Trim every regular file under `<run>/logs/` (links and special files are left alone); bytes removed."""
    logs = run_dir / "logs"
    if logs.is_symlink() or not logs.is_dir():
        return 0
    removed = 0
    for folder, _, files in os.walk(logs, followlinks=False):
        for name in files:
            path = Path(folder) / name
            if path.is_symlink():
                continue
            try:
                removed += trim_log(path, tail_bytes)
            except OSError:
                log.warning("retention could not trim %s", path, exc_info=True)
    return removed


def run_once(settings: Settings, now: datetime | None = None, budget_s: float | None = None) -> dict[str, int]:
    """One pass, at most JOBS_PER_PASS jobs of each kind, and no new job once `budget_s` is spent: what it
    did (`more`: 1 when it stopped with work left)."""
    from trainer.run_dir import job_run_dir

    cut = due(settings, now or datetime.now(timezone.utc))
    done = {"jobs_thinned": 0, "points_removed": 0, "jobs_trimmed": 0, "log_bytes_removed": 0, "more": 0}
    stop_at = time.monotonic() + budget_s if budget_s is not None else None

    def spent() -> bool:
        if stop_at is not None and time.monotonic() > stop_at:
            done["more"] = 1
            return True
        return False

    with Session(get_engine(settings.resolved_database_url)) as session:
        if cut.metrics_before is not None:
            for job_id in _candidates(session, cut.metrics_before, METRICS_ACTION, JOBS_PER_PASS):
                if spent():
                    break
                thinned = thin_metrics(session, job_id)
                if thinned is not None:
                    done["jobs_thinned"] += 1
                    done["points_removed"] += thinned[1]
        if cut.logs_before is not None:
            for job_id in _candidates(session, cut.logs_before, LOGS_ACTION, JOBS_PER_PASS):
                if spent():
                    break
                run_dir = job_run_dir(settings.resolved_runs_dir, job_id)
                removed = trim_logs(run_dir, settings.retention_log_tail_kb * 1024)
                where = "" if run_dir.is_dir() else " (run dir not on the leader's runs storage)"
                audit.record_for(session, None, LOGS_ACTION, f"job {job_id}", f"{removed} log bytes removed{where}")
                session.commit()
                done["jobs_trimmed"] += 1
                done["log_bytes_removed"] += removed
    return done


_last_run = 0.0
_lock = threading.Lock()


def run_due(settings: Settings) -> None:
    """A pass of at most PASS_BUDGET_S, if RANKZERO_RETENTION_INTERVAL_S has gone by since the last pass that
    finished its work (one that stopped with work left goes on at the next call); never raises (the
    scheduler leader calls it between passes, and retention is housekeeping)."""
    global _last_run
    with _lock:
        if time.monotonic() - _last_run < settings.retention_interval_s:
            return
        _last_run = time.monotonic()
    try:
        done = run_once(settings, budget_s=PASS_BUDGET_S)
        if done.pop("more"):
            with _lock:
                _last_run = 0.0  # a backlog: the next scheduling pass carries on
        if any(done.values()):
            log.info("retention: %s", done)
    except Exception:
        log.exception("retention pass failed; next try in %.0f s", settings.retention_interval_s)
