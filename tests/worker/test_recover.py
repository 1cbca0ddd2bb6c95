"""Recovery sweeps (no processes): stale live jobs are requeued or failed, held queued jobs re-dispatched."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
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

        def get(i):
            return s.get(Job, i)

        assert get(dead_no_restarts).status == JobStatus.failed and "max_restarts" in get(dead_no_restarts).error
        assert get(dead_restartable).status == JobStatus.queued
        assert get(dead_cancelling).status == JobStatus.cancelled
        assert get(alive).status == JobStatus.running
        # Sent again, and vouched for from now on: sent once more only if it is lost again.
        beat = get(held_queued).heartbeat_at
        assert (beat.replace(tzinfo=beat.tzinfo or timezone.utc) - datetime.now(timezone.utc)).total_seconds() > -30
    assert recover.recover_once(settings) == []  # nothing twice


def test_queued_jobs_are_resent_only_after_redispatch_after_s_and_only_in_their_pool(
    api_settings, database_url, monkeypatch
):
    """Hardening items 14 and 16: the database is the queue of record (a message lost in a crash between
    commit and send, or in a flushed Redis, is sent again), but a sweeper never touches another pool's jobs."""
    from core import jobs
    from worker import recover

    sent: list[int] = []
    monkeypatch.setattr(recover.queue, "enqueue", lambda job_id, settings: sent.append(job_id))
    settings = api_settings(database_url=database_url, heartbeat_s=1.0, redispatch_after_s=300)
    upgrade(database_url)
    with Session(get_engine(database_url)) as s:
        # The API committed the row and died before sending: born undispatched.
        never_sent = jobs.create(s, "never-sent", {"name": "never-sent", "max_steps": 5}, queue=settings.queue).id
        other_pool = jobs.create(s, "other", {"name": "other", "max_steps": 5}, queue="another-pool").id
    waiting = _add(database_url, JobStatus.queued, 120)  # sent 2 min ago, still in the broker: leave it
    lost = _add(database_url, JobStatus.queued, 600)  # sent 10 min ago and never picked up: maybe lost
    other_dead = _add(database_url, JobStatus.running, 600)
    with Session(get_engine(database_url)) as s:
        s.get(Job, other_dead).queue = "another-pool"
        s.commit()
    touched = recover.recover_once(settings)
    assert sorted(sent) == sorted([never_sent, lost])
    assert set(touched) == {never_sent, lost}
    with Session(get_engine(database_url)) as s:
        assert s.get(Job, other_dead).status == JobStatus.running  # another pool's job: not ours to judge
        assert s.get(Job, other_pool).status == JobStatus.queued
    assert waiting not in sent


@pytest.mark.postgres
def test_a_host_with_a_wrong_clock_neither_looks_dead_nor_judges_wrongly(api_settings, pg_url, monkeypatch):
    """Hardening item 13: heartbeats are stamped and judged with the database's clock. A worker 45 s
    behind stamps a heartbeat; a sweeper 45 s ahead judges it; the job (alive) is left alone."""
    from core import db, jobs, tables
    from worker import recover

    settings = api_settings(database_url=pg_url, heartbeat_s=1.0, stale_after_s=30)
    upgrade(pg_url)
    alive = _add(pg_url, JobStatus.running, 0)

    def skew(seconds: float) -> None:
        class Skewed(datetime):
            @classmethod
            def now(cls, tz=None):
                return datetime.now(tz) + timedelta(seconds=seconds)

        for module in (db, jobs, tables, recover):
            if hasattr(module, "datetime"):
                monkeypatch.setattr(module, "datetime", Skewed)
        monkeypatch.setattr(tables, "utcnow", lambda: Skewed.now(timezone.utc))
        monkeypatch.setattr(jobs, "utcnow", lambda: Skewed.now(timezone.utc), raising=False)

    skew(-45)  # the worker's host
    jobs.touch_live(get_engine(pg_url), alive)
    skew(+45)  # the sweeper's host
    assert recover.recover_once(settings) == []
    with Session(get_engine(pg_url)) as s:
        assert s.get(Job, alive).status == JobStatus.running
