"""A job whose supervisor has gone silent says so (issue 35, core/supervision.py): by tables, who supervises a job
and when its silence shows; through the API, a running job whose worker host's heartbeat is old carries
`supervisor_silent_s` and the sentence (GET /api/jobs/{id} and the list), a watched one neither, and a Slurm pool's
job names its agent."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from core.backends import BackendKind
from core.settings import Settings
from core.supervision import Silence, Supervisor, duration_words, silence, silent_after_s, supervisor_of
from core.tables import Host, JobStatus, Pool

S = JobStatus
NOW = datetime(2026, 12, 7, 5, 0, 0, tzinfo=timezone.utc)
HOST = Supervisor(BackendKind.hosts, "hostB")
AGENT = Supervisor(BackendKind.slurm, "cluster")


@pytest.mark.parametrize(
    ("status", "worker_host", "backend_job_id", "supervisor"),
    [
        (S.running, "hostB", None, HOST),
        (S.starting, "hostB,hostC", None, HOST),  # node 0's host heartbeats the job
        (S.cancelling, "hostB", None, HOST),
        (S.running, "slurm:cluster", "41", AGENT),
        (S.queued, "slurm:cluster", "41", AGENT),  # requeued, waiting in Slurm's queue: the agent follows it
        (S.queued, None, None, None),  # the scheduler's to place: nobody supervises it
        (S.queued, "hostB", None, None),  # handed back by a worker: the scheduler's again
        (S.succeeded, "hostB", None, None),
        (S.failed, "slurm:cluster", "41", None),
        (S.running, None, None, None),
    ],
)
def test_who_supervises_a_job(status: JobStatus, worker_host: str | None, backend_job_id: str | None,
                              supervisor: Supervisor | None) -> None:  # fmt: skip
    assert supervisor_of(status, worker_host, backend_job_id) == supervisor


@pytest.mark.parametrize(
    ("supervisor", "seen_s_ago", "after_s", "silent_s"),
    [
        (HOST, 5, 15, None),  # heard from within the threshold: watched
        (HOST, 15, 15, None),
        (HOST, 16, 15, 16),
        (AGENT, 180, 15, 180),
        (None, 600, 15, None),  # nobody supervises it: nothing to say
    ],
)
def test_when_the_silence_shows(supervisor: Supervisor | None, seen_s_ago: float, after_s: float,
                                silent_s: float | None) -> None:  # fmt: skip
    found = silence(supervisor, NOW - timedelta(seconds=seen_s_ago), NOW, after_s)
    assert (found.silent_s if found else None) == silent_s


def test_the_sentence_names_the_supervisor_and_when_it_was_last_seen() -> None:
    found = silence(AGENT, NOW - timedelta(minutes=3), NOW, 15)
    assert found is not None
    assert found.sentence() == (
        "nothing has watched this job for 3 min: "
        "the Slurm agent of pool cluster was last seen at 2026-12-07 04:57:00 UTC"
    )
    host = silence(HOST, (NOW - timedelta(seconds=20)).replace(tzinfo=None), NOW, 15)  # SQLite's naive UTC
    assert host is not None and host.sentence().startswith(
        "nothing has watched this job for 20 s: the worker on host hostB"
    )
    gone = silence(HOST, None, NOW, 15)
    assert gone == Silence(HOST, None, None)
    assert gone is not None
    assert "has no heartbeat on record" in gone.sentence()


@pytest.mark.parametrize(("seconds", "words"), [(20, "20 s"), (89, "89 s"), (180, "3 min"), (7200, "2.0 h")])
def test_duration_words(seconds: float, words: str) -> None:
    assert duration_words(seconds) == words


def test_the_threshold_is_half_the_stale_one_and_three_agent_periods_at_least(settings: Settings) -> None:
    assert silent_after_s(settings.model_copy(update={"heartbeat_s": 5.0, "stale_after_s": None})) == 15.0
    assert silent_after_s(settings.model_copy(update={"stale_after_s": 120.0})) == 60.0
    assert silent_after_s(settings.model_copy(update={"stale_after_s": 2.0, "slurm_poll_s": 10.0})) == 30.0


def test_a_running_job_whose_hosts_heartbeat_is_old_says_nothing_watches_it(
    client: TestClient, make_job, db: Session, settings: Settings
) -> None:
    now = datetime.now(timezone.utc)
    old = now - timedelta(seconds=silent_after_s(settings) + 120)
    db.add(Host(name="quiet", address="quiet", pool="rankzero", gpus=[], cpu_slots=2, storage_id="s", heartbeat_at=old))
    db.add(Host(name="busy", address="busy", pool="rankzero", gpus=[], cpu_slots=2, storage_id="s", heartbeat_at=now))
    db.add(Pool(name="cluster", backend="slurm", partition="low", seen_at=old))
    frozen = make_job(name="frozen", status=S.running, worker_host="quiet")
    watched = make_job(name="watched", status=S.running, worker_host="busy")
    slurm = make_job(name="slurm", status=S.running, worker_host="slurm:cluster", backend_job_id="41", queue="cluster")
    db.commit()

    shown = client.get(f"/api/jobs/{frozen.id}").json()
    assert shown["status"] == "running"
    assert shown["supervisor_silent_s"] >= silent_after_s(settings) + 120
    assert shown["supervisor_silence"].startswith("nothing has watched this job for 2 min: the worker on host quiet")
    calm = client.get(f"/api/jobs/{watched.id}").json()
    assert (calm["supervisor_silent_s"], calm["supervisor_silence"]) == (None, None)
    agent = client.get(f"/api/jobs/{slurm.id}").json()["supervisor_silence"]
    assert agent.startswith("nothing has watched this job for 2 min: the Slurm agent of pool cluster was last seen at")
    listed = {j["name"]: j["supervisor_silence"] for j in client.get("/api/jobs").json()["items"]}
    assert listed["frozen"] == shown["supervisor_silence"] and listed["watched"] is None


def test_the_streams_status_event_says_so_too_and_again_when_the_host_is_heard(
    make_job, db: Session, settings: Settings
) -> None:
    """The job page merges each `status` event into what it shows: one without the silence hid the banner."""
    from api.routes.stream import _Cursor
    from core.metric_rollup import EXTERNAL_SEQ_BASE

    old = datetime.now(timezone.utc) - timedelta(seconds=silent_after_s(settings) + 120)
    host = Host(name="quiet", address="quiet", pool="rankzero", gpus=[], cpu_slots=2, storage_id="s", heartbeat_at=old)
    db.add(host)
    frozen = make_job(name="frozen", status=S.running, worker_host="quiet")
    db.commit()
    cursor = _Cursor(-1, EXTERNAL_SEQ_BASE - 1, 0)

    def statuses() -> list[dict]:
        events, _ = cursor.poll(settings, frozen.id)
        return [json.loads(e.data) for e in events if e.event == "status"]

    (first,) = statuses()
    assert first["supervisor_silence"].startswith("nothing has watched this job for 2 min: the worker on host quiet")
    assert statuses() == []  # nothing changed: no second status event
    host.heartbeat_at = datetime.now(timezone.utc)
    db.add(host)
    db.commit()
    (heard,) = statuses()
    assert heard["supervisor_silence"] is None and heard["status"] == "running"
