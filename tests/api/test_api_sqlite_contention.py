"""SQLite under the API's readers (whose metrics reads also fold rollups, i.e. write) while another
process ingests metric points as fast as it can: no "database is locked", no 5xx."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

from fastapi.testclient import TestClient

from api.app import create_app

WRITER = textwrap.dedent(
    """
    import sys, time
    from sqlalchemy import insert, update
    from core.db import get_engine
    from core.tables import Job, MetricPoint
    url, job_id, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    engine = get_engine(url)
    seq, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        rows = [{"job_id": job_id, "seq": seq + i, "step": seq + i, "name": "train/loss",
                 "value": 1.0 / (1 + seq + i), "time": 0.0} for i in range(500)]
        with engine.begin() as conn:  # one batch per transaction, as worker/ingest.py does
            conn.execute(insert(MetricPoint), rows)
            conn.execute(update(Job).where(Job.id == job_id).values(step=seq + 500, ingested_seq=seq + 499))
        seq += 500
    print(seq)
    """
)


def test_readers_and_a_full_speed_writer_never_lock(api_settings, make_job_sqlite, auth_headers: dict) -> None:
    settings, job_id = make_job_sqlite
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, settings.resolved_database_url, str(job_id), "4"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    statuses: list[int] = []
    try:
        with TestClient(create_app(settings), headers=auth_headers, raise_server_exceptions=False) as c:
            deadline = time.monotonic() + 4
            while time.monotonic() < deadline:
                statuses.append(c.get(f"/api/jobs/{job_id}/metrics", params={"max_points": 200}).status_code)
                statuses.append(c.get("/api/jobs").status_code)
                statuses.append(c.get(f"/api/jobs/{job_id}").status_code)
        out, err = writer.communicate(timeout=60)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    print(f"writer inserted {out.strip()} points while the API served {len(statuses)} reads")
    assert writer.returncode == 0, err[-3000:]
    assert "locked" not in err
    assert int(out) > 0 and len(statuses) > 10
    assert set(statuses) == {200}, statuses
    with TestClient(create_app(settings), headers=auth_headers) as c:
        series = c.get(f"/api/jobs/{job_id}/metrics", params={"max_points": 200}).json()["series"][0]
        assert series["total_points"] == int(out)
