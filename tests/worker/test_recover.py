"""Recovery sweeps (no processes): stale live jobs are requeued or failed, held queued jobs re-dispatched."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from sqlmodel import Session

from core.db import get_engine
from core.migrate import upgrade
from core.tables import Job, JobStatus


def _add(url: str, status: JobStatus, beat_age_s: float, **spec_over) -> int:
    spec = {"name": "r", "max_steps": 5, **spec_over}
    with Session(get_engine(url)) as s:
        job = Job(name="r", spec=spec, status=status, attempt=1 if status != JobStatus.queued else 0,
                  heartbeat_at=datetime.now(timezone.utc) - timedelta(seconds=beat_age_s))  # fmt: skip
        s.add(job)
        s.commit()
        return job.id


def test_recovery_sweep(api_settings, database_url, monkeypatch):
    from worker import recover

    sent: list[int] = []
    monkeypatch.setattr(recover.queue, "enqueue", lambda job_id, settings: sent.append(job_id))
    settings = api_settings(database_url=database_url, heartbeat_s=1.0)
    upgrade(database_url)
    dead_no_restarts = _add(database_url, JobStatus.running, 600)
    dead_restartable = _add(database_url, JobStatus.running, 600, max_restarts=2)
    dead_cancelling = _add(database_url, JobStatus.cancelling, 600)
    alive = _add(database_url, JobStatus.running, 1)
    held_queued = _add(database_url, JobStatus.queued, 600)
    touched = recover.recover_once(settings)
    assert set(touched) == {dead_no_restarts, dead_restartable, dead_cancelling, held_queued}
    assert sorted(sent) == sorted([dead_restartable, held_queued])
    with Session(get_engine(database_url)) as s:
        get = lambda i: s.get(Job, i)
        assert get(dead_no_restarts).status == JobStatus.failed and "max_restarts" in get(dead_no_restarts).error
        assert get(dead_restartable).status == JobStatus.queued
        assert get(dead_cancelling).status == JobStatus.cancelled
        assert get(alive).status == JobStatus.running
        assert get(held_queued).heartbeat_at is None
    assert recover.recover_once(settings) == []  # nothing twice
