"""One scheduler pass against a real database (no processes): what it writes and sends."""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from sqlmodel import Session

from core import jobs
from core.db import get_engine
from core.migrate import upgrade
from core.tables import Host, Job, JobStatus


def _host(url: str, name: str, slots: int, age_s: float = 0.0, storage: str = "s1") -> None:
    beat = datetime.now(timezone.utc) - timedelta(seconds=age_s)
    with Session(get_engine(url)) as s:
        s.add(Host(name=name, address=f"10.0.0.{len(name)}", pool="rankzero", gpus=[], cpu_slots=slots,
                   storage_id=storage, heartbeat_at=beat))  # fmt: skip
        s.commit()


def _submit(url: str, **spec: Any) -> int:
    body = {"name": "j", "max_steps": 5, "device": "cpu", **spec}
    with Session(get_engine(url)) as s:
        return jobs.create(s, "j", body, queue="rankzero").id


def _row(url: str, job_id: int) -> Job:
    return jobs.get_job(get_engine(url), job_id)


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, str, str]]:
    from worker import scheduler

    out: list[tuple[int, int, str, str]] = []
    monkeypatch.setattr(scheduler.queue, "send_node", lambda j, r, p, q, settings: out.append((j, r, p, q)))
    return out


def test_a_pass_places_sends_explains_and_refuses(api_settings, database_url, sent) -> None:
    from worker.scheduler import schedule_once

    settings = api_settings(database_url=database_url, stale_after_s=30)
    upgrade(database_url)
    _host(database_url, "host-a", 2)
    _host(database_url, "host-b", 1)
    _host(database_url, "host-dead", 8, age_s=600)
    two_nodes = _submit(database_url, nproc=1, nnodes=2)
    too_big = _submit(database_url, nproc=4)
    with Session(get_engine(database_url)) as s:  # a row an older version stored: no longer valid
        broken = jobs.create(s, "old", {"name": "old", "max_steps": 5, "retired_field": 1}, queue="rankzero").id
    schedule_once(settings)

    placed = _row(database_url, two_nodes)
    assert sorted(n["host"] for n in placed.placement["nodes"]) == ["host-a", "host-b"]
    assert placed.placement_id and placed.status == JobStatus.queued  # node 0 claims it
    assert sorted((j, r, q) for j, r, _, q in sent) == [
        (two_nodes, 0, f"rankzero.host.{placed.placement['nodes'][0]['host']}"),
        (two_nodes, 1, f"rankzero.host.{placed.placement['nodes'][1]['host']}"),
    ]
    assert {p for _, _, p, _ in sent} == {placed.placement_id}
    waiting = _row(database_url, too_big)
    assert waiting.placement is None and "4" in waiting.pending_reason, waiting.pending_reason
    assert "host-dead" not in waiting.pending_reason  # a dead host is nobody's capacity
    refused = _row(database_url, broken)
    assert refused.status == JobStatus.failed and "no longer valid" in refused.error

    sent.clear()
    schedule_once(settings)  # nothing new: no second message, no second placement
    assert sent == [] and _row(database_url, two_nodes).placement_id == placed.placement_id


def test_a_placement_whose_message_cannot_be_sent_is_taken_back(api_settings, database_url, monkeypatch) -> None:
    from worker import scheduler

    def broker_down(*_: Any) -> None:
        raise ConnectionError("broker unreachable")

    monkeypatch.setattr(scheduler.queue, "send_node", broker_down)
    settings = api_settings(database_url=database_url)
    upgrade(database_url)
    _host(database_url, "host-a", 2)
    job_id = _submit(database_url, nproc=2)
    scheduler.schedule_once(settings)
    row = _row(database_url, job_id)
    assert row.placement is None and row.status == JobStatus.queued and "broker" in row.pending_reason


def test_a_placed_job_whose_host_died_before_starting_it_is_placed_again(api_settings, database_url, sent) -> None:
    from worker.scheduler import schedule_once

    settings = api_settings(database_url=database_url, stale_after_s=30)
    upgrade(database_url)
    _host(database_url, "host-a", 2)
    job_id = _submit(database_url, nproc=2)
    schedule_once(settings)
    first = _row(database_url, job_id).placement_id
    with Session(get_engine(database_url)) as s:
        s.get(Host, "host-a").heartbeat_at = datetime.now(timezone.utc) - timedelta(seconds=600)
        s.commit()
    _host(database_url, "host-b", 2)
    schedule_once(settings)  # takes the orphan back
    schedule_once(settings)  # and places it on the live host
    row = _row(database_url, job_id)
    assert row.placement_id not in (None, first) and row.placement["nodes"][0]["host"] == "host-b"


def test_rankzero_scheduler_runs_a_candidate_on_its_own(api_settings, tmp_path) -> None:
    import signal
    import subprocess

    from tests.support.commands import RANKZERO, ROOT
    from tests.support.jobs import wait
    from tests.support.settings import settings_env

    settings = api_settings(scheduler_poll_s=0.2)
    url = settings.resolved_database_url
    upgrade(url)
    _host(url, "host-a", 2)
    job_id = _submit(url, nproc=2)
    with open(tmp_path / "scheduler.log", "wb") as log:
        proc = subprocess.Popen([RANKZERO, "scheduler"], cwd=ROOT, env=settings_env(settings), stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        placed = wait(lambda: _row(url, job_id).placement, 60, "the job placed by `rankzero scheduler`")
        assert placed["nodes"][0]["host"] == "host-a"
        assert "now the active scheduler" in (tmp_path / "scheduler.log").read_text()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_a_pass_that_preempts_wakes_the_victims_supervisor(api_settings, database_url, sent, monkeypatch) -> None:
    """A victim's supervisor sleeps on the commit wake-up (worker/wakeups.py): the pass that asks it to step
    back wakes it once, so the preemption is acted on at once, not at its next row read."""
    from core import wake
    from worker import scheduler
    from worker.scheduler import schedule_once

    settings = api_settings(database_url=database_url, stale_after_s=30)
    upgrade(database_url)
    engine = get_engine(database_url)
    _host(database_url, "host-a", 1)
    low = _submit(database_url, nproc=1, priority=-1, preemptible=True)
    schedule_once(settings)
    placed = _row(database_url, low)
    assert placed.placement_id, placed.pending_reason
    assert jobs.claim(engine, low, settings.runs_dir, host="host-a", placement_id=placed.placement_id)
    assert jobs.mark_running(engine, low, pid=os.getpid(), detail="running", attempt=1)
    watch = wake.commit_watch(engine)  # SQLite: the touch a supervisor sleeps on (None on PostgreSQL)
    if watch is not None:
        watch.arm()  # forget the touches made so far
    high = _submit(database_url, nproc=1, priority=10)
    if watch is not None:
        watch.arm()  # the submit's own touch
    woken: list[object] = []
    real = wake.after_commit
    monkeypatch.setattr(scheduler.wake, "after_commit", lambda e: (woken.append(e), real(e)))
    schedule_once(settings)
    assert _row(database_url, low).preempt_for == high
    assert woken == [engine]
    if watch is not None:
        assert watch.wait(0.5, 0.05), "the commit touch a victim's supervisor sleeps on was not made"
        watch.close()
    woken.clear()
    schedule_once(settings)  # asked already: no second request, no second wake-up
    assert woken == []
