"""The retention pass (core/retention.py; issue 42 item 4): an old job's thinned series charts the same at
chart resolution (every min and max a 16-step rollup bucket holds is kept), recent and running jobs are
untouched, each job is done once (its audit entry), and an old job's rank logs keep their tail."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import insert, text
from sqlmodel import Session

from core import metric_rollup, retention
from core.db import get_engine
from core.migrate import upgrade
from core.settings import Settings
from core.tables import JobStatus, MetricPoint
from tests.support.rows import insert_job

NOW = datetime(2026, 12, 7, tzinfo=timezone.utc)
OLD = NOW - timedelta(days=60)


def _series(job_id: int, seq0: int, name: str, values: list[float], step0: int = 0) -> list[dict]:
    return [
        {"job_id": job_id, "seq": seq0 + i, "name": name, "step": step0 + i, "value": v, "time": 0.0}
        for i, v in enumerate(values)
    ]


def _points(db: Session, job_id: int, n: int = 20_000) -> list[dict]:
    rng = random.Random(42)
    loss = [2.0 * math.exp(-i / 4000) + rng.gauss(0, 0.05) for i in range(n)]
    loss[n // 3] = 50.0  # a one-step spike every chart must still show
    loss[n // 2] = float("inf")  # a diverged step: never plotted
    flat = [1.0] * (n // 4)  # min == max in every bucket: one point of each kept
    rows = _series(job_id, 0, "train/loss", loss) + _series(job_id, n, "train/flat", flat)
    rows += _series(job_id, 2 * n, "eval/acc", [0.5 + i / 100 for i in range(40)])
    rows = [{**r, "step": r["step"] * 500} if r["name"] == "eval/acc" else r for r in rows]  # sparse: all kept
    base = metric_rollup.EXTERNAL_SEQ_BASE  # the worker's own points (system samples) are thinned alike
    rows += _series(job_id, base, "sys/gpu_util", [float(rng.randint(0, 100)) for _ in range(n // 8)])
    db.execute(insert(MetricPoint), rows)
    db.commit()
    metric_rollup.fold(db, job_id, base - 1, base + n)  # as their writer does
    db.commit()
    return rows


def _charts(db: Session, job_id: int) -> dict[tuple[str, int, int | None, int | None], list]:
    """Every chart of the job at a resolution of 16 steps or coarser: full range and 16-aligned zooms."""
    spans = {"train/loss": 20_000, "train/flat": 5_000, "sys/gpu_util": 2_500}
    out = {}
    for name, span in spans.items():
        for max_points in (100, 200, 300, 600, 1000, 2000):
            for lo, hi in ((None, None), (1_600, 9_599)):
                width = (hi - lo + 1) if lo is not None and hi is not None else span
                if math.ceil(width / (max_points // 2 - 2)) < retention.FINEST or (hi is not None and hi > span):
                    continue  # finer than the rollups: a zoom past 16 steps a point
                out[name, max_points, lo, hi] = metric_rollup.query(db, job_id, name, max_points, lo, hi).points
    out["eval/acc", 1000, None, None] = metric_rollup.query(db, job_id, "eval/acc", 1000).points
    return out


@pytest.fixture
def db(database_url: str) -> Iterator[Session]:
    upgrade(database_url)
    with Session(get_engine(database_url)) as session:  # closed before the database is dropped
        yield session


def test_a_thinned_job_charts_the_same_at_chart_resolution(db: Session) -> None:
    job = insert_job(db, status=JobStatus.succeeded, finished_at=OLD)
    assert job.id is not None
    rows = _points(db, job.id)
    metric_rollup.refresh(db, job.id)
    before = _charts(db, job.id)
    assert any(v == 50.0 for _, v in before["train/loss", 200, None, None])  # the spike is charted

    done = retention.thin_metrics(db, job.id)

    assert done is not None and done[0] == len(rows)
    left = db.execute(text("SELECT count(*) FROM metric_points WHERE job_id = :j"), {"j": job.id}).scalar_one()
    assert left == len(rows) - done[1] and left < len(rows) / 6  # the bulk of a dense run is gone
    assert _charts(db, job.id) == before
    eval_steps = [s for s, _ in before["eval/acc", 1000, None, None]]
    assert eval_steps == [i * 500 for i in range(40)]  # a sparse series keeps every point


def test_the_pass_thins_old_finished_jobs_once_and_leaves_the_rest(
    db: Session, tmp_path: Path, database_url: str
) -> None:
    old = insert_job(db, status=JobStatus.failed, finished_at=OLD)
    recent = insert_job(db, status=JobStatus.succeeded, finished_at=NOW - timedelta(days=1))
    running = insert_job(db, status=JobStatus.running)
    counts = {}
    for job in (old, recent, running):
        assert job.id is not None
        counts[job.id] = len(_points(db, job.id, 2_000))
    db.commit()  # no transaction left open while the pass runs (PostgreSQL ends idle ones)
    settings = Settings(data_dir=tmp_path, runs_dir=tmp_path / "runs", database_url=database_url)  # pyright: ignore[reportCallIssue]

    first = retention.run_once(settings, NOW)
    again = retention.run_once(settings, NOW)

    assert first["jobs_thinned"] == 1 and first["points_removed"] > 0
    assert again["jobs_thinned"] == 0  # done once: its audit entry says so
    left = dict(db.execute(text("SELECT job_id, count(*) FROM metric_points GROUP BY job_id")).all())
    assert left[old.id] == counts[old.id] - first["points_removed"]
    assert left[recent.id] == counts[recent.id] and left[running.id] == counts[running.id]
    audit = db.execute(text("SELECT actor, target FROM audit_events WHERE action = 'retention.metrics'")).all()
    assert audit == [("system", f"job {old.id}")]


def test_an_old_jobs_rank_logs_keep_their_tail_and_links_are_left_alone(
    db: Session, tmp_path: Path, database_url: str
) -> None:
    from trainer.run_dir import job_run_dir

    old = insert_job(db, status=JobStatus.succeeded, finished_at=NOW - timedelta(days=200))
    assert old.id is not None
    runs = tmp_path / "runs"
    logs = job_run_dir(runs, old.id) / "logs" / "attempt_1" / "0"
    logs.mkdir(parents=True)
    lines = [f"step {i} loss {1 / (i + 1):.6f}\n" for i in range(50_000)]
    (logs / "stdout.log").write_text("".join(lines))
    outside = tmp_path / "precious.txt"
    outside.write_text("x" * 500_000)
    (logs / "stderr.log").symlink_to(outside)  # a job's link out of its run dir: never followed
    settings = Settings(data_dir=tmp_path, runs_dir=runs, database_url=database_url, retention_log_tail_kb=4)  # pyright: ignore[reportCallIssue]

    db.commit()
    done = retention.run_once(settings, NOW)

    text_left = (logs / "stdout.log").read_text()
    assert done["jobs_trimmed"] == 1 and text_left.startswith("[rankzero: the first ")
    kept = text_left.splitlines(keepends=True)[1:]
    assert kept == lines[-len(kept) :] and 4096 - 40 < sum(map(len, kept)) <= 4096  # whole lines, the last ones
    assert outside.read_text() == "x" * 500_000


@pytest.mark.parametrize(
    ("size", "tail", "start"),
    [(0, 1024, 0), (1024, 1024, 0), (1025, 1024, 1), (10_000, 1024, 8976)],
)
def test_a_log_keeps_its_last_tail_bytes(size: int, tail: int, start: int) -> None:
    assert retention.log_keep_from(size, tail) == start


@pytest.mark.parametrize(("metrics_days", "logs_days"), [(30, 90), (0, 90), (30, 0), (0, 0)])
def test_zero_days_turns_that_part_off(metrics_days: float, logs_days: float) -> None:
    s = Settings(retention_metrics_after_days=metrics_days, retention_logs_after_days=logs_days)  # pyright: ignore[reportCallIssue]
    cut = retention.due(s, NOW)
    assert cut.metrics_before == (NOW - timedelta(days=metrics_days) if metrics_days else None)
    assert cut.logs_before == (NOW - timedelta(days=logs_days) if logs_days else None)


def test_a_pass_out_of_budget_leaves_the_rest_to_the_next(db: Session, tmp_path: Path, database_url: str) -> None:
    """The leader's scheduling waits on a pass at most its budget: past it, no new job is started, and the
    pass says work is left (the next scheduling pass carries on)."""
    jobs = [insert_job(db, status=JobStatus.succeeded, finished_at=OLD) for _ in range(3)]
    db.commit()
    settings = Settings(data_dir=tmp_path, runs_dir=tmp_path / "runs", database_url=database_url)  # pyright: ignore[reportCallIssue]

    spent = retention.run_once(settings, NOW, budget_s=0.0)
    rest = retention.run_once(settings, NOW, budget_s=60.0)

    assert spent["jobs_thinned"] == 0 and spent["more"] == 1
    assert rest["jobs_thinned"] == len(jobs) and rest["more"] == 0
