"""SQLite under the API's readers (whose metrics reads also fold rollups, i.e. write) while another
process ingests metric points as fast as it can: no "database is locked", no 5xx."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

from fastapi.testclient import TestClient

from api.app import create_app

WRITER = textwrap.dedent(
    """
    import os, sys
    from sqlalchemy import insert, update
    from core.db import get_engine
    from core.tables import Job, MetricPoint
    url, job_id, stop = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    engine = get_engine(url)
    seq = 0
    while not os.path.exists(stop):  # until the readers are done: they overlap it whatever the machine's load
        rows = [{"job_id": job_id, "seq": seq + i, "step": seq + i, "name": "train/loss",
                 "value": 1.0 / (1 + seq + i), "time": 0.0} for i in range(500)]
        with engine.begin() as conn:  # one batch per transaction, as worker/ingest.py does
            conn.execute(insert(MetricPoint), rows)
            conn.execute(update(Job).where(Job.id == job_id).values(step=seq + 500, ingested_seq=seq + 499))
        seq += 500
    print(seq)
    """
)


READS = 40  # rounds of three reads, all while the writer writes


def test_readers_and_a_full_speed_writer_never_lock(
    api_settings, make_job_sqlite, auth_headers: dict, tmp_path: Path
) -> None:
    settings, job_id = make_job_sqlite
    stop = tmp_path / "stop"
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, settings.resolved_database_url, str(job_id), str(stop)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    statuses: list[int] = []
    try:
        with TestClient(create_app(settings), headers=auth_headers, raise_server_exceptions=False) as c:
            while _points(settings, job_id) == 0 and writer.poll() is None:  # the writer is under way
                time.sleep(0.05)
            for _ in range(READS):
                statuses.append(c.get(f"/api/jobs/{job_id}/metrics", params={"max_points": 200}).status_code)
                statuses.append(c.get("/api/jobs").status_code)
                statuses.append(c.get(f"/api/jobs/{job_id}").status_code)
        overlapped = writer.poll() is None  # still writing after the last read
        stop.touch()
        out, err = writer.communicate(timeout=120)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    print(f"writer inserted {out.strip()} points while the API served {len(statuses)} reads")
    assert writer.returncode == 0, err[-3000:]
    assert "locked" not in err
    assert overlapped and int(out) > 0 and len(statuses) == 3 * READS
    assert set(statuses) == {200}, statuses
    with TestClient(create_app(settings), headers=auth_headers) as c:
        series = c.get(f"/api/jobs/{job_id}/metrics", params={"max_points": 200}).json()["series"][0]
        assert series["total_points"] == int(out)


def _points(settings, job_id: int) -> int:
    from sqlalchemy import text

    from core.db import get_engine

    with get_engine(settings.resolved_database_url).connect() as conn:
        return int(
            conn.execute(text("SELECT count(*) FROM metric_points WHERE job_id = :j"), {"j": job_id}).scalar_one()
        )
