"""Metric series: raw when small, min/max downsampling past max_points (spikes survive),
agreement with a brute-force bucketing, step ranges, incremental rollups — both databases."""

from __future__ import annotations

import math
import random

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import insert
from sqlmodel import Session

from core.tables import MetricPoint


def _insert(db: Session, job_id: int, points: list[tuple[int, str, int, float]]) -> None:
    db.execute(
        insert(MetricPoint),
        [{"job_id": job_id, "seq": s, "name": n, "step": st, "value": v, "time": 0.0} for s, n, st, v in points],
    )
    db.commit()


def test_small_series_come_back_raw(client: TestClient, make_job, db: Session) -> None:
    job = make_job()
    _insert(
        db,
        job.id,
        [(i * 2, "train/loss", i, 1.0 / (i + 1)) for i in range(50)] + [(i * 2 + 1, "lr", i, 0.1) for i in range(50)],
    )
    body = client.get(f"/api/jobs/{job.id}/metrics").json()
    assert body["job_id"] == job.id
    by_name = {s["name"]: s for s in body["series"]}
    assert set(by_name) == {"train/loss", "lr"}
    loss = by_name["train/loss"]
    assert loss["total_points"] == 50 and not loss["downsampled"]
    assert loss["points"][:2] == [{"step": 0, "value": 1.0}, {"step": 1, "value": 0.5}]
    only = client.get(f"/api/jobs/{job.id}/metrics", params={"name": "lr", "start_step": 10, "end_step": 19}).json()
    assert [s["name"] for s in only["series"]] == ["lr"] and len(only["series"][0]["points"]) == 10


def test_downsampling_keeps_the_spike(client: TestClient, make_job, db: Session) -> None:
    job = make_job()
    n, spike = 20_000, 12_345
    _insert(
        db, job.id, [(i, "train/loss", i, 1.0 + 1e-3 * math.sin(i) + (100.0 if i == spike else 0.0)) for i in range(n)]
    )
    s = client.get(f"/api/jobs/{job.id}/metrics", params={"name": "train/loss", "max_points": 100}).json()["series"][0]
    assert s["downsampled"] and s["total_points"] == n and len(s["points"]) <= 100
    assert {"step": spike, "value": 101.0 + 1e-3 * math.sin(spike)} in s["points"]
    steps = [p["step"] for p in s["points"]]
    assert steps == sorted(steps)
    dip = client.get(
        f"/api/jobs/{job.id}/metrics", params={"name": "train/loss", "max_points": 10, "start_step": 5000}
    ).json()
    assert any(p["step"] == spike for p in dip["series"][0]["points"]) and dip["series"][0]["total_points"] == n - 5000


def test_downsampling_matches_brute_force_and_follows_new_points(client: TestClient, make_job, db: Session) -> None:
    rng = random.Random(7)
    job = make_job()
    values = {i: rng.gauss(0, 1) for i in range(30_000)}
    _insert(db, job.id, [(i, "m", i, values[i]) for i in range(20_000)])
    first = client.get(f"/api/jobs/{job.id}/metrics", params={"name": "m", "max_points": 400}).json()["series"][0]
    assert first["total_points"] == 20_000
    _insert(db, job.id, [(i, "m", i, values[i]) for i in range(20_000, 30_000)])  # arrives after the first fold
    lo, hi = 1234, 28_765
    s = client.get(
        f"/api/jobs/{job.id}/metrics", params={"name": "m", "max_points": 400, "start_step": lo, "end_step": hi}
    ).json()["series"][0]
    assert s["total_points"] == hi - lo + 1 and len(s["points"]) <= 400
    got = {(p["step"], p["value"]) for p in s["points"]}
    # Whatever the bucketing, the global extremes of the range and every returned point are real data.
    in_range = {i: v for i, v in values.items() if lo <= i <= hi}
    assert all(values[st] == v for st, v in got)
    assert max(in_range.items(), key=lambda kv: kv[1]) in got and min(in_range.items(), key=lambda kv: kv[1]) in got
    # Buckets narrower than the finest rollup (here 14 steps) are computed from the raw points in SQL.
    lo, hi = 1000, 9000
    fine = client.get(
        f"/api/jobs/{job.id}/metrics", params={"name": "m", "max_points": 1200, "start_step": lo, "end_step": hi}
    ).json()["series"][0]
    assert fine["downsampled"] and fine["total_points"] == hi - lo + 1 and len(fine["points"]) <= 1200
    in_range = {i: v for i, v in values.items() if lo <= i <= hi}
    got = {(p["step"], p["value"]) for p in fine["points"]}
    assert all(values[st] == v for st, v in got) and max(in_range.items(), key=lambda kv: kv[1]) in got


def test_non_finite_values_and_bad_params(client: TestClient, make_job, db: Session) -> None:
    job = make_job()
    _insert(db, job.id, [(0, "x", 0, 1.0), (1, "x", 1, float("inf")), (2, "x", 2, 2.0)])
    s = client.get(f"/api/jobs/{job.id}/metrics").json()["series"][0]
    assert [p["value"] for p in s["points"]] == [1.0, 2.0]
    assert client.get(f"/api/jobs/{job.id}/metrics", params={"max_points": 0}).status_code == 422
    assert client.get(f"/api/jobs/{job.id}/metrics", params={"max_points": 10**12}).status_code == 422
    assert client.get(f"/api/jobs/{job.id}/metrics", params={"start_step": 5, "end_step": 1}).status_code == 422
    assert client.get("/api/jobs/424242/metrics").status_code == 404


def test_concurrent_refreshes_while_ingesting_count_every_point_once(make_job, db: Session, settings) -> None:
    import threading

    from sqlalchemy import text

    from core import metric_rollup
    from core.db import get_engine

    job_id = make_job().id  # plain int: the threads must not touch the test session's objects
    url = settings.resolved_database_url
    errors: list[BaseException] = []
    stop = threading.Event()

    def refresher() -> None:
        with Session(get_engine(url)) as s:
            while not stop.is_set():
                try:
                    metric_rollup.refresh(s, job_id)
                except BaseException as exc:
                    errors.append(exc)
                    return

    threads = [threading.Thread(target=refresher) for _ in range(3)]
    for t in threads:
        t.start()
    for batch in range(20):  # the ingester: batches committed in seq order
        _insert(db, job_id, [(batch * 500 + i, "m", batch * 500 + i, float(i)) for i in range(500)])
    stop.set()
    for t in threads:
        t.join(timeout=30)
    assert errors == []
    metric_rollup.refresh(db, job_id)
    for width in metric_rollup.WIDTHS:
        n = db.execute(
            text("SELECT sum(n) FROM metric_rollups WHERE job_id = :j AND width = :w"), {"j": job_id, "w": width}
        ).scalar()
        assert n == 10_000, width


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # SQLite's busy timeout; PostgreSQL's rows wait
def test_a_refresh_that_cannot_get_sqlites_write_lock_folds_nothing_and_the_next_folds_it_all(
    make_job, db: Session, settings
) -> None:
    import sqlite3

    from sqlalchemy import create_engine, text

    from core import metric_rollup

    url = settings.resolved_database_url
    job_id = make_job().id
    _insert(db, job_id, [(i, "m", i, float(i)) for i in range(300)])
    holder = sqlite3.connect(url.split("///", 1)[1], timeout=5)
    holder.execute("BEGIN IMMEDIATE")  # another writer holds the lock past the refresher's busy timeout
    impatient = create_engine(url, connect_args={"timeout": 0.2})
    try:
        with Session(impatient) as s:
            assert metric_rollup.refresh(s, job_id) == 0
        holder.rollback()
        with Session(impatient) as s:
            assert metric_rollup.refresh(s, job_id) == 300  # the mark had not moved: nothing lost
        n = db.execute(text("SELECT sum(n) FROM metric_rollups WHERE job_id = :j AND width = :w"),
                       {"j": job_id, "w": metric_rollup.WIDTHS[0]}).scalar()  # fmt: skip
        assert n == 300
    finally:
        holder.close()
        impatient.dispose()


def test_rollup_rows_equal_a_python_summary_at_every_width(make_job, db: Session) -> None:
    from sqlalchemy import text

    from core import metric_rollup

    rng = random.Random(3)
    job_id = make_job().id
    steps = sorted(rng.sample(range(0, 300_000), 6000))
    values = {st: rng.gauss(0, 1) for st in steps}
    half = len(steps) // 2
    for part in (steps[:half], steps[half:]):  # two folds: the second merges into the first
        _insert(db, job_id, [(st, "s", st, values[st]) for st in part])
        metric_rollup.refresh(db, job_id)
    for width in metric_rollup.WIDTHS:
        expected: dict[int, list] = {}
        for st in steps:
            b = expected.setdefault(st // width, [0, math.inf, None, -math.inf, None])
            b[0] += 1
            if values[st] < b[1]:
                b[1], b[2] = values[st], st
            if values[st] > b[3]:
                b[3], b[4] = values[st], st
        rows = db.execute(
            text(
                "SELECT bucket, n, min_value, min_step, max_value, max_step FROM metric_rollups "
                "WHERE job_id = :j AND name = 's' AND width = :w ORDER BY bucket"
            ),
            {"j": job_id, "w": width},
        ).all()
        assert {r[0]: list(r[1:]) for r in rows} == expected, width
