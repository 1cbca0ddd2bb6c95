"""A job's time breakdown from its rows: kept at its terminal transition, the same in REST and summed per user
and pool in /metrics; the parts sum to the job's wall time."""

from __future__ import annotations

from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlmodel import Session, select

from core import jobs
from core.tables import Job, JobStatus, JobTransition, MetricPoint, User, utcnow
from core.time_breakdown import PARTS, unix
from tests.support.rows import insert_job

S = JobStatus


def _history(db: Session) -> Job:
    """Submitted 100 s ago: queued 10 s, starting 5 s, ranks up at -85 s; its first point (step 1, 1 s a
    step) at -80 s, so 4 s of start-up; a 3 s checkpoint at step 40; steps until -1 s."""
    now = utcnow()
    at = lambda s: now - timedelta(seconds=s)  # noqa: E731
    owner = db.get(User, 1)
    job = insert_job(db, "breakdown", S.queued, created_at=at(100), owner_id=owner.id if owner else None, queue="gpu")
    for t in db.exec(select(JobTransition).where(JobTransition.job_id == job.id)):  # the submit row: at creation
        t.at = at(100)
    db.add(JobTransition(job_id=job.id, status=S.starting, at=at(90), attempt=1))
    db.add(JobTransition(job_id=job.id, status=S.running, at=at(85), attempt=1))
    t0 = unix(now)
    seq = 0
    for step in range(1, 81):
        db.add(MetricPoint(job_id=job.id, seq=seq, step=step, name="train/loss", value=1.0 / step, time=t0 - 81 + step))
        seq += 1
    db.add(MetricPoint(job_id=job.id, seq=seq, step=40, name="time/checkpoint_s", value=3.0, time=t0 - 40))
    job.status, job.attempt = S.running, 1
    db.add(job)
    db.commit()
    return job


def test_breakdown_is_kept_and_served(client: TestClient, db: Session) -> None:
    job = _history(db)
    assert job.id is not None
    live = client.get(f"/api/jobs/{job.id}").json()["time_breakdown"]
    assert sum(live[p] for p in PARTS) == pytest.approx(live["wall_s"], abs=0.01)
    assert jobs.transition(db, job.id, S.succeeded)
    db.commit()
    db.refresh(job)
    assert job.time_breakdown is not None and job.finished_at is not None
    wall = unix(job.finished_at) - unix(job.created_at)
    got = client.get(f"/api/jobs/{job.id}").json()["time_breakdown"]
    assert got["wall_s"] == pytest.approx(wall, abs=0.01)
    assert sum(got[p] for p in PARTS) == pytest.approx(wall, abs=0.01)
    assert got["queued"] == pytest.approx(10, abs=0.5)
    assert got["starting"] == pytest.approx(5 + 4, abs=0.5)
    assert got["checkpointing"] == pytest.approx(3, abs=0.01)
    assert got["lost_to_restarts"] == 0 and got["stopped"] == 0
    assert got["training"] == pytest.approx(wall - 10 - 9 - 3, abs=0.5)

    samples = {
        (s.name, s.labels["part"]): (s.labels, s.value)
        for family in text_string_to_metric_families(client.get("/metrics").text)
        for s in family.samples
        if s.name == "rankzero_job_seconds_total" and s.labels.get("pool") == "gpu"
    }
    owner = db.get(User, 1)
    for part in PARTS:
        labels, value = samples[("rankzero_job_seconds_total", part)]
        assert labels["user"] == (owner.name if owner else "")
        assert value == pytest.approx(got[part], abs=0.01)
