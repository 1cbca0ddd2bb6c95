"""GET /jobs and GET /jobs/{id} answer in one serialization pass from an autocommit session (issue 12
item 19: p99 under load): the bodies are exactly what JobPublic / JobDetail say, the page's total
comes with it (and past the end too)."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlmodel import Session, select

from api.models import JobDetail, JobPublic, TimeBreakdown, TransitionPublic
from core import jobs, time_breakdown
from core.tables import Job, JobStatus, JobTransition


def _roundtrip(model) -> dict:
    """A model as a client decodes it (datetimes as ISO strings)."""
    import json

    return json.loads(model.model_dump_json())


def test_list_bodies_are_job_public_with_totals(client: TestClient, spec: dict, make_job, db: Session) -> None:
    for i in range(7):
        make_job(name=f"run-{i}", status=JobStatus.running if i % 2 else JobStatus.queued, spec=spec)
    body = client.get("/api/jobs", params={"limit": 3}).json()
    assert body["total"] == 7 and body["limit"] == 3 and body["offset"] == 0
    rows = db.exec(select(Job).order_by(Job.id.desc()).limit(3)).all()  # type: ignore[attr-defined]
    assert body["items"] == [_roundtrip(JobPublic.from_row(r)) for r in rows]
    running = client.get("/api/jobs", params={"status": "running", "limit": 2, "offset": 1}).json()
    assert running["total"] == 3 and [j["status"] for j in running["items"]] == ["running", "running"]
    named = client.get("/api/jobs", params={"name": "run-6"}).json()
    assert named["total"] == 1 and named["items"][0]["name"] == "run-6"
    past = client.get("/api/jobs", params={"status": "running", "offset": 50}).json()
    assert past == {"items": [], "total": 3, "limit": 50, "offset": 50}
    assert client.get("/api/jobs", params={"name": "nothing-like-it"}).json()["total"] == 0


def test_show_body_is_job_detail(client: TestClient, spec: dict, db: Session) -> None:
    job_id = client.post("/api/jobs", json=spec).json()["id"]
    assert jobs.transition(db, job_id, JobStatus.cancelled, expect=JobStatus.queued, detail="cancel requested")
    db.commit()
    job = db.get(Job, job_id)
    db.refresh(job)
    transitions = db.exec(select(JobTransition).where(JobTransition.job_id == job_id).order_by(JobTransition.id)).all()
    assert job.owner_id is not None  # the server token is the first admin's: its jobs are that admin's
    want = JobDetail(
        **JobPublic.from_row(job, {job.owner_id: "admin"}).model_dump(),
        transitions=[TransitionPublic.from_row(t) for t in transitions],
        # Kept on the row at its terminal transition (core/time_breakdown.py), so the same at every read.
        time_breakdown=TimeBreakdown(**time_breakdown.load(db, job).as_dict()),
    )
    r = client.get(f"/api/jobs/{job_id}")
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert r.json() == _roundtrip(want)
    assert [t["status"] for t in r.json()["transitions"]] == ["queued", "cancelled"]
    assert client.get("/api/jobs/999999").status_code == 404
