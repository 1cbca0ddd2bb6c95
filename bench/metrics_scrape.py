"""How long one /metrics scrape takes as the jobs table grows (issue 25): the collector reads the database
at scrape time (jobs by status and pool, every started job's queue wait for the histogram, running jobs,
hosts), so its cost grows with the table. SQLite file, in process (TestClient), median of 15 scrapes.
Run: .venv/bin/python -m bench.metrics_scrape [N ...]   (default 1000 10000 50000 jobs)
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import insert
from sqlmodel import Session

from api.app import create_app
from core.db import get_engine
from core.settings import Settings
from core.tables import Host, Job, JobStatus, utcnow

TOKEN = "bench-token-" + "x" * 40
SPEC = {"name": "bench", "model": {"name": "mlp"}, "data": {"name": "digits"}}


def fill(url: str, jobs: int) -> None:
    engine = get_engine(url)
    now = utcnow()
    statuses = [JobStatus.succeeded] * 8 + [JobStatus.failed, JobStatus.cancelled]
    rows = [
        {
            "name": f"job-{i}", "spec": SPEC, "queue": f"pool-{i % 3}",
            "status": statuses[i % 10] if i >= 100 else JobStatus.running,
            "created_at": now - timedelta(seconds=600 + i), "started_at": now - timedelta(seconds=i),
            "step": i, "total_steps": 10 * i + 1, "latest_loss": 0.5, "samples_per_s": 100.0,
        }
        for i in range(jobs)
    ]  # fmt: skip
    with Session(engine) as s:
        for start in range(0, len(rows), 5000):
            s.execute(insert(Job), rows[start : start + 5000])
        for h in range(20):
            s.add(Host(name=f"host-{h}", address="10.0.0.1", pool=f"pool-{h % 3}", gpus=[str(g) for g in range(8)],
                       cpu_slots=64, storage_id="s"))  # fmt: skip
        s.commit()


def main(sizes: list[int]) -> None:
    print(f"{'jobs':>8} {'median ms':>10} {'max ms':>8} {'bytes':>8}")
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            settings = Settings(data_dir=Path(tmp), api_token=TOKEN)  # pyright: ignore[reportCallIssue]
            with TestClient(create_app(settings), headers={"Authorization": f"Bearer {TOKEN}"}) as client:
                fill(settings.resolved_database_url, n)
                client.get("/metrics")
                times, size = [], 0
                for _ in range(15):
                    t0 = time.perf_counter()
                    r = client.get("/metrics")
                    times.append((time.perf_counter() - t0) * 1000)
                    size = len(r.content)
                print(f"{n:>8} {statistics.median(times):>10.1f} {max(times):>8.1f} {size:>8}")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [1000, 10000, 50000])
