"""Faults 5 and 6: a job outliving Redis's visibility timeout; Redis down mid-run; PostgreSQL
restarted mid-run. Each on servers of our own (tests/support/servers.py), never the machine's shared ones."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from tests.support.jobs import events, points, run_dir, seconds, slow_spec, wait, wait_step_written


def _launches(run: Path) -> int:
    """torchrun launches of a job: one `started` event and one attempt log dir per launch."""
    started = [e for e in events(run) if e["type"] == "started"]
    attempts = [p for p in (run / "logs").iterdir() if p.is_dir()]
    assert len(started) == len(attempts), (started, attempts)
    return len(started)


def test_job_outliving_visibility_timeout_launches_once(service, workers, redis_server) -> None:
    settings, client = service(broker_url=redis_server.url)
    short = {"RANKZERO_VISIBILITY_TIMEOUT_S": "2"}
    workers.start(settings, extra_env=short)
    # 150 steps (≥ 15 s): still running when the second worker is up and the message is handed out again.
    job = client.submit(slow_spec("outlives-visibility", step_s=0.1, max_steps=150, nproc=1))
    client.wait(job["id"], lambda j: j["status"] == "running", 60, "running")
    time.sleep(3)  # the job is now older than the visibility timeout and its message still unacked
    # A second worker starting up sweeps the unacked messages past the timeout back into the queue
    # (kombu restores them at start and every unacked_restore_interval × throttle seconds) and takes it.
    workers.start(settings, extra_env=short)
    done = client.wait_terminal(job["id"], 150)
    assert done["status"] == "succeeded" and done["attempt"] == 1, done
    assert _launches(run_dir(settings, job["id"])) == 1
    # The broker did hand the message out again while the job ran; the claim made it a no-op.
    logs = workers.log(0) + workers.log(1)
    assert "nothing to do (a repeated delivery)" in logs, "the message was never redelivered: the test proved nothing"


def test_redis_down_mid_run(service, workers, redis_server) -> None:
    outage = seconds("RANKZERO_REL_REDIS_OUTAGE_S", 10)
    settings, client = service(broker_url=redis_server.url)
    workers.start(settings, pool="threads", concurrency=2, extra_env={"RANKZERO_STALE_AFTER_S": "4"})
    steps = max(60, int((outage + 8) / 0.1))  # still training when Redis is back
    running = client.submit(slow_spec("through-outage", step_s=0.1, max_steps=steps, nproc=1))
    wait_step_written(run_dir(settings, running["id"]), 3, 120)  # the trainer's record; the API's step lags it

    redis_server.stop()
    down_at = time.monotonic()
    # While Redis is down: the job goes on, its status is served, and a new job is accepted (queued).
    before = client.job(running["id"])["step"]
    during = client.submit(slow_spec("submitted-in-outage", step_s=0.0, nproc=1, max_steps=5))
    assert during["status"] == "queued"
    seen = []
    while time.monotonic() - down_at < outage:
        r = client.http.get(f"/jobs/{running['id']}")
        assert r.status_code == 200, r.text
        seen.append(r.json()["step"])
        time.sleep(0.5)
    assert client.job(running["id"])["status"] == "running"
    assert seen[-1] > before, f"the running job made no progress while Redis was down ({before} → {seen[-1]})"
    redis_server.start()  # back, empty: whatever it held is gone

    first = client.wait_terminal(running["id"], steps * 0.2 + 60)
    assert first["status"] == "succeeded" and first["attempt"] == 1, first
    assert points(client, running["id"]) == list(range(1, steps + 1))
    later = client.wait_terminal(during["id"], 90)  # dispatched once Redis is back
    assert later["status"] == "succeeded", later
    assert _launches(run_dir(settings, running["id"])) == 1 and _launches(run_dir(settings, during["id"])) == 1


def test_postgres_restart_mid_run(service, workers, pg_cluster) -> None:
    outage = seconds("RANKZERO_REL_PG_OUTAGE_S", 10)
    settings, client = service(database_url=pg_cluster.url)
    # A stale threshold shorter than the outage: a recovery sweep trusting old heartbeats would call the job lost.
    workers.start(settings, extra_env={"RANKZERO_STALE_AFTER_S": "4"})
    steps = max(60, int((outage + 8) / 0.1))  # still training when PostgreSQL is back
    job = client.submit(slow_spec("pg-restart", step_s=0.1, max_steps=steps, nproc=1))
    wait_step_written(run_dir(settings, job["id"]), 3, 120)  # the trainer's record; the API's step lags it

    pg_cluster.stop()
    time.sleep(outage)
    r = client.http.get(f"/jobs/{job['id']}")
    assert r.status_code == 503, r.text  # the API says so, and does not crash
    pg_cluster.start()

    done = client.wait_terminal(job["id"], steps * 0.2 + 90)
    assert done["status"] == "succeeded" and done["attempt"] == 1, done
    assert [t["status"] for t in done["transitions"]] == ["queued", "starting", "running", "succeeded"], done[
        "transitions"
    ]
    assert _launches(run_dir(settings, job["id"])) == 1
    assert points(client, job["id"]) == list(range(1, steps + 1)), (
        "points written while the database was down were lost"
    )
    wait(lambda: httpx.get(client.http.base_url.join("/api/health")).status_code == 200, 10, "health")
