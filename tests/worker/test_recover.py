"""Recovery sweeps (no processes): stale live jobs are requeued or failed, held queued jobs re-dispatched."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from sqlmodel import Session

from core.db import get_engine
from core.migrate import upgrade
from core.tables import Job, JobStatus


def _add(url: str, status: JobStatus, beat_age_s: float, losses: int = 0, placed: bool = False, **spec_over) -> int:
    spec = {"name": "r", "max_steps": 5, **spec_over}
    placement = {"nodes": [{"host": "h", "node_rank": 0, "gpus": [], "slots": 1}], "nproc": 1,
                 "accumulation_steps": 1} if placed else None  # fmt: skip
    # The stamp's age: a live job's heartbeat, or when a queued job was placed (its `vouched_at`).
    stamp = datetime.now(timezone.utc) - timedelta(seconds=beat_age_s)
    live = status != JobStatus.queued
    with Session(get_engine(url)) as s:
        job = Job(name="r", spec=spec, status=status, attempt=1 if status != JobStatus.queued else 0,
                  heartbeat_at=stamp if live else None, vouched_at=None if live else stamp, host_losses=losses,
                  placement=placement, placement_id="p1" if placed else None)  # fmt: skip
        s.add(job)
        s.commit()
        return job.id


def test_recovery_sweep_resumes_a_job_whose_host_died_without_spending_max_restarts(api_settings, database_url):
    from worker import recover

    settings = api_settings(database_url=database_url, heartbeat_s=1.0, max_host_losses=3)
    upgrade(database_url)
    dead = _add(database_url, JobStatus.running, 600, placed=True)  # max_restarts 0: still resumed
    dead_often = _add(database_url, JobStatus.running, 600, losses=3)  # it may be what kills its hosts
    dead_cancelling = _add(database_url, JobStatus.cancelling, 600)
    alive = _add(database_url, JobStatus.running, 1)
    touched = recover.recover_once(settings)
    assert set(touched) == {dead, dead_often, dead_cancelling}
    with Session(get_engine(database_url)) as s:

        def get(i):
            return s.get(Job, i)

        resumed = get(dead)
        assert resumed.status == JobStatus.queued and resumed.host_losses == 1 and resumed.restarts_used == 0
        assert resumed.placement is None and resumed.placement_id is None  # the scheduler places it afresh
        assert get(dead_often).status == JobStatus.failed and "RANKZERO_MAX_HOST_LOSSES 3" in get(dead_often).error
        assert get(dead_cancelling).status == JobStatus.cancelled
        assert get(alive).status == JobStatus.running
    assert recover.recover_once(settings) == []  # nothing twice


def test_placed_jobs_never_started_are_placed_again_only_after_redispatch_after_s_and_only_in_their_pool(
    api_settings, database_url
):
    """Hardening items 14 and 16: the database is the queue of record (a node message lost in a crash, or
    in a flushed Redis, is sent again by placing the job again), but a sweeper never touches another
    pool's jobs."""
    from worker import recover

    settings = api_settings(database_url=database_url, heartbeat_s=1.0, redispatch_after_s=300)
    upgrade(database_url)
    waiting = _add(database_url, JobStatus.queued, 120, placed=True)  # placed 2 min ago: leave it
    lost = _add(database_url, JobStatus.queued, 600, placed=True)  # placed 10 min ago, never started
    unplaced = _add(database_url, JobStatus.queued, 600)  # the scheduler's to place: nothing to take back
    other_dead = _add(database_url, JobStatus.running, 600)
    with Session(get_engine(database_url)) as s:
        s.get(Job, other_dead).queue = "another-pool"
        s.commit()
    touched = recover.recover_once(settings)
    assert touched == [lost]
    with Session(get_engine(database_url)) as s:
        assert s.get(Job, lost).placement_id is None and "placing again" in s.get(Job, lost).pending_reason
        assert s.get(Job, waiting).placement_id == "p1"
        assert s.get(Job, unplaced).status == JobStatus.queued
        assert s.get(Job, other_dead).status == JobStatus.running  # another pool's job: not ours to judge


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


@pytest.mark.parametrize(
    ("worker_host", "named"), [("hostB", "host hostB: "), ("hostA,hostB", "host hostA: "), (None, ""), ("", "")]
)
def test_the_lost_host_is_its_node_zeros(worker_host, named):
    from worker.recover import lost_host

    assert lost_host(worker_host) == named


def test_a_host_loss_names_the_host_in_the_jobs_timeline(api_settings, database_url):
    """Issue 35: the timeline (and `rankzero show`) says which host went silent."""
    from sqlmodel import col, select

    from core.tables import JobTransition
    from worker import recover

    settings = api_settings(database_url=database_url, heartbeat_s=1.0, max_host_losses=3)
    upgrade(database_url)
    dead = _add(database_url, JobStatus.running, 600, placed=True)
    with Session(get_engine(database_url)) as s:
        job = s.get(Job, dead)
        assert job is not None
        job.worker_host = "hostB"
        s.add(job)
        s.commit()
    assert recover.recover_once(settings) == [dead]
    with Session(get_engine(database_url)) as s:
        details = s.exec(select(JobTransition.detail).where(col(JobTransition.job_id) == dead)).all()
    assert any(d and d.startswith("worker lost (host hostB: no heartbeat since ") for d in details), details
