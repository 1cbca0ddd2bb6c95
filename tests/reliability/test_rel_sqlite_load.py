"""Fault 8: SQLite under the live API's readers while a worker process ingests metrics at full speed
(the worker's own Ingestor, heartbeats, status polls and rollup folds): zero "database is locked".

CI runs 15 s; RANKZERO_REL_SQLITE_S=60 runs the full minute of the issue."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import threading

import httpx
import pytest
from sqlmodel import Session

from tests.support.jobs import seconds

WRITER = textwrap.dedent(
    """
    import sys, time
    from sqlmodel import Session
    from core import metric_rollup
    from core.db import get_engine
    from core import jobs as claim
    from worker.ingest import Ingestor

    url, job_id, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    engine = get_engine(url)
    ingestor = Ingestor(engine, job_id)
    seq, step, end, folded = 1, 1, time.monotonic() + seconds, time.monotonic()
    while time.monotonic() < end:  # as fast as it can: the supervisor's loop without the sleep
        batch = []
        for _ in range(500):
            for name in ("train/loss", "lr"):
                batch.append({"seq": seq, "time": time.time(), "type": "metric", "step": step, "name": name,
                              "value": 1.0 / step})
                seq += 1
            step += 1
        batch.append({"seq": seq, "time": time.time(), "type": "progress", "step": step - 1, "total_steps": 10**9,
                      "epoch": 0, "samples": step * 32, "samples_per_s": 1000.0, "eta_s": 1.0})
        seq += 1
        ingestor.ingest(batch)
        claim.status_of(engine, job_id)
        claim.touch_live(engine, job_id)
        if time.monotonic() - folded > 2:  # as the supervisor folds rollups every 2 s
            with Session(engine) as s:
                metric_rollup.refresh(s, job_id)
                s.commit()
            folded = time.monotonic()
    print(ingestor.seen.points)
    """
)


def _reader(base: str, token: str, job_id: int, stop: threading.Event, results: list[object]) -> None:
    paths = [f"/api/jobs/{job_id}/metrics?max_points=500", f"/api/jobs/{job_id}", "/api/jobs",
             f"/api/jobs/{job_id}/metrics?name=train/loss&max_points=2000&start_step=100",
             f"/api/jobs/{job_id}/checkpoints"]  # fmt: skip
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        i = 0
        while not stop.is_set():
            try:
                r = http.get(paths[i % len(paths)])
                results.append(r.status_code if r.status_code == 200 else f"{r.status_code} {r.text[:200]}")
            except httpx.HTTPError as exc:
                results.append(repr(exc))
            i += 1


def test_sqlite_readers_and_full_speed_ingest_never_lock(
    api_settings, live_api, caplog: pytest.LogCaptureFixture
) -> None:
    from core.db import get_engine
    from core.migrate import upgrade
    from core.tables import Job, JobStatus

    duration = seconds("RANKZERO_REL_SQLITE_S", 15)
    settings = api_settings()
    url = settings.resolved_database_url
    assert url.startswith("sqlite")
    upgrade(url)
    with Session(get_engine(url)) as s:
        job = Job(name="contended", spec={"name": "contended", "max_steps": 10}, status=JobStatus.running)
        s.add(job)
        s.commit()
        job_id = job.id
    base = live_api(settings)
    caplog.set_level(logging.WARNING)

    writer = subprocess.Popen([sys.executable, "-c", WRITER, url, str(job_id), str(duration)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    stop = threading.Event()
    results: list[object] = []
    readers = [threading.Thread(target=_reader, args=(base, settings.token(), job_id, stop, results)) for _ in range(4)]
    for t in readers:
        t.start()
    try:
        out, err = writer.communicate(timeout=duration + 60)
    finally:
        stop.set()
        for t in readers:
            t.join(timeout=30)
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    assert writer.returncode == 0, err[-3000:]
    assert "locked" not in err and "locked" not in caplog.text
    bad = [r for r in results if r != 200]
    assert not bad, bad[:5]
    written = int(out)
    print(f"{written} points ingested ({written / duration:.0f}/s) while the API answered {len(results)} reads")
    assert written > 1000 and len(results) > 4 * duration
    body = httpx.get(f"{base}/api/jobs/{job_id}/metrics", params={"name": "train/loss", "max_points": 100},
                     headers={"Authorization": f"Bearer {settings.token()}"}).json()  # fmt: skip
    assert body["series"][0]["total_points"] == written // 2
