"""Database size per running-job-hour, before and after the retention pass (issue 42 item 4).

    .venv/bin/python bench/retention_size.py [--jobs 4] [--steps-per-s 2.5] [--series 4] [DATABASE_URL]

Without a URL: a fresh PostgreSQL database on 127.0.0.1:5432 (user postgres), dropped afterwards. Each
job is one hour of a run that logs `--series` series every step at `--steps-per-s` (the default, 4 × 2.5 =
10 points a second, is issue 42's simulated job) plus a system sample (4 series) every 10 s; its rollups
are folded as the metrics route folds them. Sizes are PostgreSQL's on-disk sizes of metric_points and
metric_rollups with their indexes (pg_total_relation_size), after VACUUM FULL each time so the figure is
the data, not the free space a plain VACUUM leaves for reuse.
"""

from __future__ import annotations

import argparse
import math
import random
import secrets
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ADMIN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres connect_timeout=3"
TABLES = ("metric_points", "metric_rollups")


def _seed(url: str, jobs: int, steps_per_s: float, series: int) -> list[int]:
    from sqlalchemy import insert, text
    from sqlmodel import Session

    from core import metric_rollup
    from core.db import get_engine
    from core.tables import Job, JobStatus, MetricPoint

    rng = random.Random(1)
    steps = int(3600 * steps_per_s)
    ids = []
    with Session(get_engine(url)) as db:
        for j in range(jobs):
            job = Job(name=f"bench-{j}", spec={"name": f"bench-{j}", "max_steps": steps}, status=JobStatus.succeeded,
                      finished_at=datetime.now(timezone.utc) - timedelta(days=365))  # fmt: skip
            db.add(job)
            db.commit()
            assert job.id is not None
            rows, seq = [], 0
            for step in range(steps):
                for s in range(series):
                    value = math.exp(-step / steps) * (s + 1) + rng.gauss(0, 0.02)
                    rows.append({"job_id": job.id, "seq": seq, "name": f"train/s{s}", "step": step, "value": value,
                                 "time": step / steps_per_s})  # fmt: skip
                    seq += 1
            base = metric_rollup.EXTERNAL_SEQ_BASE
            t0 = 1_765_000_000_000
            sys_rows = [
                {"job_id": job.id, "seq": base + k * 4 + s, "name": f"sys/m{s}", "step": t0 + k * 10_000,
                 "value": rng.uniform(0, 100), "time": 0.0}
                for k in range(360) for s in range(4)
            ]  # fmt: skip
            for i in range(0, len(rows), 20_000):
                db.execute(insert(MetricPoint), rows[i : i + 20_000])
            db.execute(insert(MetricPoint), sys_rows)
            db.commit()
            db.execute(text("ANALYZE metric_points"))  # a fresh table's missing statistics make the fold crawl
            db.execute(text("ANALYZE metric_rollups"))
            metric_rollup.fold(db, job.id, base - 1, base + len(sys_rows))
            db.commit()
            metric_rollup.refresh(db, job.id)
            ids.append(job.id)
    return ids


def _sizes(url: str) -> dict[str, int]:
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as conn:
        for t in TABLES:
            conn.execute(sql.SQL("VACUUM FULL {}").format(sql.Identifier(t)))
        return {t: conn.execute("SELECT pg_total_relation_size(%s)", (t,)).fetchone()[0] for t in TABLES}  # type: ignore[index]


def measure(url: str, jobs: int, steps_per_s: float, series: int) -> dict[str, float]:
    from core import retention
    from core.migrate import upgrade
    from core.settings import Settings

    upgrade(url)
    _seed(url, jobs, steps_per_s, series)
    before = _sizes(url)
    settings = Settings(database_url=url, data_dir=Path("/tmp/rankzero-bench-retention"))  # pyright: ignore[reportCallIssue]
    t0, c0 = time.monotonic(), time.process_time()
    done = retention.run_once(settings)
    wall, cpu = time.monotonic() - t0, time.process_time() - c0
    after = _sizes(url)
    per_hour = {f"{t}_before_mb": before[t] / jobs / 2**20 for t in TABLES}
    per_hour.update({f"{t}_after_mb": after[t] / jobs / 2**20 for t in TABLES})
    per_hour.update({"points_removed": done["points_removed"], "pass_wall_s": wall, "pass_cpu_s": cpu})
    return per_hour


def main() -> None:
    ap = argparse.ArgumentParser(description="Database size per running-job-hour, before and after retention.")
    ap.add_argument("url", nargs="?")
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--steps-per-s", type=float, default=2.5)
    ap.add_argument("--series", type=int, default=4)
    args = ap.parse_args()
    import psycopg
    from psycopg import sql

    name = None
    url = args.url
    if url is None:
        name = f"rankzero_bench_{secrets.token_hex(4)}"
        with psycopg.connect(ADMIN, autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        url = f"postgresql://postgres@127.0.0.1:5432/{name}"
    try:
        r = measure(url, args.jobs, args.steps_per_s, args.series)
    finally:
        if name is not None:
            from core.db import get_engine

            get_engine(url).dispose()
            with psycopg.connect(ADMIN, autocommit=True) as admin:
                admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
    pts = args.steps_per_s * args.series
    print(f"per running-job-hour ({pts:g} points/s + 4 system series every 10 s), {args.jobs} job-hours, PostgreSQL:")
    print(f"{'table (with indexes)':<26}{'before MiB':>12}{'after MiB':>12}")
    for t in TABLES:
        print(f"{t:<26}{r[t + '_before_mb']:>12.2f}{r[t + '_after_mb']:>12.2f}")
    tb = sum(r[t + "_before_mb"] for t in TABLES)
    ta = sum(r[t + "_after_mb"] for t in TABLES)
    print(f"{'total':<26}{tb:>12.2f}{ta:>12.2f}   ({tb / ta:.1f}x smaller)")
    print(f"points removed: {r['points_removed']:.0f}; ", end="")
    print(f"the pass: {r['pass_wall_s']:.1f} s wall, {r['pass_cpu_s']:.1f} s CPU")


if __name__ == "__main__":
    main()
