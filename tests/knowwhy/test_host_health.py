"""core/host_health.py: a host that fails jobs for reasons not their own leaves placement, saying why; an admin
puts it back. The pure verdict table-driven; then through core/jobs.py's transitions and REST."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from core import jobs
from core.db import get_engine
from core.host_health import FAULTS_TO_DRAIN, WINDOW_S, Outcome, fault_of, verdict
from core.settings import Settings
from core.tables import Host, JobStatus
from tests.support.rows import insert_job

S = JobStatus
F = "launch failed"

FAULTS = [
    (S.failed, "launch failed", True),
    (S.failed, "worker error", True),
    (S.queued, "worker lost (no heartbeat for 60 s); resuming from the latest checkpoint (1/3 host losses)", True),
    (S.failed, "rank 1 exited with code 1", False),  # the job's own
    (S.failed, "preparing the environment failed", False),  # its requirements
    (S.failed, "checkpoint unavailable", False),
    (S.succeeded, "launch failed", False),  # not an end that fails
    (S.queued, None, False),
]


@pytest.mark.parametrize(("status", "detail", "host_fault"), FAULTS)
def test_fault_of(status, detail, host_fault) -> None:
    assert (fault_of(status, detail) is not None) is host_fault


NOW = 10_000.0
VERDICTS = [
    ("three in a row", [(1, F), (2, F), (3, F)], True),
    ("two", [(1, F), (2, F)], False),
    ("a success in between", [(1, F), (2, F), (3, None), (4, F)], False),
    ("a success before", [(1, None), (2, F), (3, F), (4, F)], True),
    ("one outside the window", [(-WINDOW_S, F), (2, F), (3, F)], False),
]


@pytest.mark.parametrize(("outcomes", "drained"), [v[1:] for v in VERDICTS], ids=[v[0] for v in VERDICTS])
def test_verdict(outcomes, drained) -> None:
    got = verdict("h1", [Outcome(NOW - 100 + t, n, why) for n, (t, why) in enumerate(outcomes)], NOW)
    assert (got is not None) is drained
    if got:
        assert f"{FAULTS_TO_DRAIN} jobs in a row" in got and "rankzero hosts undrain h1" in got and F in got


def _add_host(db: Session, name: str) -> None:
    db.add(Host(name=name, address="10.0.0.1", pool="rankzero", gpus=[], cpu_slots=2, storage_id="s"))
    db.commit()


def _attempt(settings: Settings, db: Session, host: str, to: JobStatus, detail: str) -> int:
    job = insert_job(db, f"on-{host}")
    assert job.id is not None
    engine = get_engine(settings.resolved_database_url)
    assert jobs.claim(engine, job.id, settings.resolved_runs_dir, host=host) is not None
    assert jobs.finish(engine, job.id, to, detail=detail, attempt=1)
    return job.id


def test_a_host_that_fails_three_jobs_in_a_row_leaves_placement(
    client: TestClient, db: Session, settings: Settings
) -> None:
    _add_host(db, "h1")
    _add_host(db, "h12")  # a name h1 is the start of: never blamed for h1's faults, nor h1 for its
    _attempt(settings, db, "h1", S.failed, "launch failed")
    _attempt(settings, db, "h1", S.failed, "rank 0 exited with code 1")  # the job's own: does not count
    _attempt(settings, db, "h12", S.succeeded, "finished")
    _attempt(settings, db, "h1", S.failed, "worker error")
    hosts = {h["name"]: h for h in client.get("/api/hosts").json()}
    assert not hosts["h1"]["drain_requested"], hosts["h1"]
    third = _attempt(settings, db, "h1", S.failed, "launch failed")

    hosts = {h["name"]: h for h in client.get("/api/hosts").json()}
    assert hosts["h1"]["drain_requested"] and hosts["h1"]["draining"], hosts["h1"]
    note = hosts["h1"]["drain_note"]
    assert "3 jobs in a row" in note and f"job {third}: launch failed" in note and "undrain h1" in note, note
    assert not hosts["h12"]["drain_requested"]

    r = client.post("/api/hosts/h1/undrain")  # an admin puts it back
    assert r.status_code == 200, r.text
    assert not r.json()["drain_requested"] and r.json()["drain_note"] is None
    _attempt(settings, db, "h1", S.succeeded, "finished")  # and its record starts again
    _attempt(settings, db, "h1", S.failed, "launch failed")
    assert not {h["name"]: h for h in client.get("/api/hosts").json()}["h1"]["drain_requested"]
