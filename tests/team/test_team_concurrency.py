"""Quotas decided atomically (issue 37): parallel submits, extend-bests and sweep trials end at exactly the
quota, on SQLite and PostgreSQL. A check-then-insert let 12 parallel submits against a quota of 3 make 10.
No worker: jobs stay queued, so every job made counts against the queued quota."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sqlmodel import Session, col, select

from core.db import get_engine
from core.sweeps import driver
from core.tables import AuditEvent, Job, JobStatus, SweepTrial
from tests.support.jobs import fake_spec

QUOTA = 4
PARALLEL = 20


def _queued(settings: Any, owner_id: int) -> int:
    with Session(get_engine(settings.resolved_database_url)) as s:
        rows = s.exec(select(Job).where(Job.owner_id == owner_id, Job.status == JobStatus.queued)).all()
        return len(rows)


def test_twenty_parallel_submits_end_at_exactly_the_queued_quota(service, add_user, database_url) -> None:
    settings, admin = service(database_url=database_url)
    alice_row, alice = add_user(admin, "alice", max_queued=QUOTA)

    def submit(i: int) -> int:
        return alice.http.post("/jobs", json=fake_spec(f"p{i}")).status_code

    with ThreadPoolExecutor(PARALLEL) as pool:
        codes = list(pool.map(submit, range(PARALLEL)))
    assert sorted(codes) == [201] * QUOTA + [429] * (PARALLEL - QUOTA), codes
    assert _queued(settings, alice_row["user"]["id"]) == QUOTA
    r = alice.http.post("/jobs", json=fake_spec("one-more"))
    assert r.status_code == 429
    assert f"alice has {QUOTA} of {QUOTA} jobs queued" in r.text, r.text


def test_sweep_trials_and_submits_racing_end_at_exactly_the_quota(service, add_user, database_url) -> None:
    """Two sweep drivers (as a lease handed over mid-pass would run them) and ten submits at once: the sweep's
    trials are created within its owner's quota like her submits, and each trial is audited with its sweep."""
    settings, admin = service(database_url=database_url)
    alice_row, alice = add_user(admin, "alice", max_queued=QUOTA)
    sweep = alice.http.post(
        "/sweeps",
        json={
            "name": "race",
            "job": fake_spec("race"),
            "method": "random",
            "metric": "train/loss",
            "goal": "minimize",
            "trials": 40,
            "parallel": 20,
            "parameters": {"optimizer.lr": {"log_uniform": [0.001, 0.1]}},
        },
    )
    assert sweep.status_code == 201, sweep.text

    def act(i: int) -> object:
        if i < 2:
            return driver.drive_once(settings)
        return alice.http.post("/jobs", json=fake_spec(f"s{i}")).status_code

    with ThreadPoolExecutor(12) as pool:
        list(pool.map(act, range(12)))
    driver.drive_once(settings)  # a later pass: still nothing past the quota
    assert _queued(settings, alice_row["user"]["id"]) == QUOTA
    note = alice.http.get(f"/sweeps/{sweep.json()['id']}").json()["note"]
    assert note.startswith("new trials wait: alice has 4 of 4 jobs queued"), note  # the sweep's page says why
    with Session(get_engine(settings.resolved_database_url)) as s:
        trials = s.exec(select(SweepTrial).where(SweepTrial.sweep_id == sweep.json()["id"])).all()
        audited = s.exec(
            select(AuditEvent).where(col(AuditEvent.detail).contains(f"of sweep {sweep.json()['id']}"))
        ).all()
    assert len(audited) == len(trials)
    assert all(e.actor == "alice" and e.action == "job.submit" for e in audited)


def test_parallel_submits_of_two_users_end_at_exactly_the_servers_limit(service, add_user, database_url) -> None:
    """RANKZERO_MAX_ACTIVE_JOBS is everyone's: near it each submit recounts under a server-wide lock."""
    settings, admin = service(database_url=database_url, max_active_jobs=QUOTA)
    _, alice = add_user(admin, "alice")
    _, bob = add_user(admin, "bob")

    def submit(i: int) -> int:
        return (alice if i % 2 else bob).http.post("/jobs", json=fake_spec(f"m{i}")).status_code

    with ThreadPoolExecutor(PARALLEL) as pool:
        codes = list(pool.map(submit, range(PARALLEL)))
    assert sorted(codes) == [201] * QUOTA + [429] * (PARALLEL - QUOTA), codes
    with Session(get_engine(settings.resolved_database_url)) as s:
        assert len(s.exec(select(Job)).all()) == QUOTA
