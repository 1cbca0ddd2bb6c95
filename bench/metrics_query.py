"""GET /jobs/{id}/metrics on a 1,000,000-point series with max_points=2000 (target ≤ 150 ms).

    .venv/bin/python bench/metrics_query.py [DATABASE_URL ...]

Without URLs it measures a fresh SQLite file and a fresh PostgreSQL database (127.0.0.1:5432,
user postgres) and drops both afterwards. `measure(database_url)` is the function
bench/service.py calls; it seeds one job with N points (one `train/loss` series with a spike),
folds them into the rollups (timed: the one-off cost a first read pays when nothing folded them
at ingest), then times the full route, HTTP included, through an in-process client.
"""

from __future__ import annotations

import math
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

N_POINTS = 1_000_000
MAX_POINTS = 2000
SPIKE_STEP = 777_777
REPEATS = 7
BENCH_TOKEN = "rankzero-bench-token-0123456789abcdef0123456789"  # the API refuses short tokens


def _seed(database_url: str, n: int) -> int:
    from sqlalchemy import text

    from core.db import get_engine

    engine = get_engine(database_url)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO jobs (name, spec, status, attempt, created_at, step, epoch, samples, ingested_seq) "
                "VALUES ('bench-metrics', '{\"name\": \"bench-metrics\", \"max_steps\": 1}', 'running', 1, "
                "CURRENT_TIMESTAMP, 0, 0, 0, -1)"
            )
        )
        job_id = conn.execute(text("SELECT max(id) FROM jobs")).scalar()

    def rows():
        for i in range(n):
            yield job_id, i, i, "train/loss", math.exp(-i / (n / 5)) + (50.0 if i == SPIKE_STEP else 0.0), float(i)

    if engine.dialect.name == "sqlite":
        raw = engine.raw_connection()
        try:
            raw.cursor().executemany(
                "INSERT INTO metric_points (job_id, seq, step, name, value, time) VALUES (?,?,?,?,?,?)", rows()
            )
            raw.commit()
        finally:
            raw.close()
    else:
        import psycopg

        dsn = database_url.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(dsn) as pc:
            with pc.cursor().copy("COPY metric_points (job_id, seq, step, name, value, time) FROM STDIN") as copy:
                for row in rows():
                    copy.write_row(row)
            pc.execute("ANALYZE metric_points")
    return job_id


def measure(database_url: str, n_points: int = N_POINTS, max_points: int = MAX_POINTS) -> dict[str, Any]:
    """Seed `n_points` into a job on `database_url` (migrated first) and time the metrics route."""
    from fastapi.testclient import TestClient
    from sqlmodel import Session

    from api.app import create_app
    from core import metric_rollup
    from core.db import get_engine
    from core.settings import Settings

    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp), database_url=database_url, api_token=BENCH_TOKEN)
        app = create_app(settings)  # migrates
        t = time.perf_counter()
        job_id = _seed(database_url, n_points)
        seed_s = time.perf_counter() - t
        with Session(get_engine(database_url)) as session:
            t = time.perf_counter()
            metric_rollup.refresh(session, job_id)
            fold_s = time.perf_counter() - t
        times = []
        with TestClient(app, headers={"Authorization": f"Bearer {BENCH_TOKEN}"}) as client:
            params = {"name": "train/loss", "max_points": max_points}
            for _ in range(REPEATS):
                t = time.perf_counter()
                r = client.get(f"/api/jobs/{job_id}/metrics", params=params)
                times.append(time.perf_counter() - t)
                r.raise_for_status()
        series = r.json()["series"][0]
        spike_kept = any(p["step"] == SPIKE_STEP for p in series["points"])
    return {
        "database": get_engine(database_url).dialect.name,
        "points": n_points,
        "max_points": max_points,
        "returned": len(series["points"]),
        "total_points": series["total_points"],
        "spike_kept": spike_kept,
        "seed_s": round(seed_s, 2),
        "fold_s": round(fold_s, 2),
        "query_ms_median": round(statistics.median(times) * 1000, 1),
        "query_ms_max": round(max(times) * 1000, 1),
        "target_ms": 150,
    }


def _fresh_databases() -> list[tuple[str, Any]]:
    made: list[tuple[str, Any]] = []
    tmp = Path(tempfile.mkdtemp(prefix="rankzero-bench-"))
    made.append((f"sqlite:///{tmp / 'bench.db'}", None))
    try:
        import psycopg

        name = f"rankzero_t_bench_{secrets.token_hex(4)}"
        with psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres connect_timeout=3", autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        made.append((f"postgresql://postgres@127.0.0.1:5432/{name}", name))
    except Exception as exc:
        print(f"(PostgreSQL skipped: {exc})", file=sys.stderr)
    return made


def main(argv: list[str]) -> None:
    import psycopg

    from core.db import get_engine

    targets = [(u, None) for u in argv] or _fresh_databases()
    results = []
    try:
        for url, _ in targets:
            results.append(measure(url))
    finally:
        for url, pg_name in targets:
            if pg_name:
                get_engine(url).dispose()
                with psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres", autocommit=True) as c:
                    c.execute(f'DROP DATABASE IF EXISTS "{pg_name}" WITH (FORCE)')
    cols = [
        "database",
        "points",
        "max_points",
        "returned",
        "spike_kept",
        "fold_s",
        "query_ms_median",
        "query_ms_max",
        "target_ms",
    ]
    print(" | ".join(cols))
    print(" | ".join("---" for _ in cols))
    for r in results:
        print(" | ".join(str(r[c]) for c in cols))


if __name__ == "__main__":
    main(sys.argv[1:])
