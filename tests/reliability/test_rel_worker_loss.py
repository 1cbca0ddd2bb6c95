"""Faults 1 and 2: the worker host dies (SIGKILL of the worker and its ranks), or is stopped for a
deploy (SIGTERM). Real Celery workers, torchrun and the real trainer."""

from __future__ import annotations

import signal
import time
from typing import Any

import pytest

from tests.support.jobs import (
    assert_same_weights,
    events,
    points,
    reference_weights,
    run_dir,
    slow_spec,
    wait,
    wait_step_written,
)
from tests.support.procs import alive, job_processes, kill_all

STALE = {"RANKZERO_STALE_AFTER_S": "3"}  # recovery declares a silent worker dead after 3 s


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Weights of an uninterrupted run of the spec both tests use (their `step_s` changes no math)."""
    return reference_weights(slow_spec("ref"), tmp_path_factory.mktemp("reference"))


def _assert_complete_and_exact(client: Any, settings: Any, job_id: int, reference: dict[str, Any]) -> None:
    total = 40
    for name in ("train/loss", "lr"):
        assert points(client, job_id, name) == list(range(1, total + 1)), f"{name}: a point duplicated or lost"
    assert_same_weights(run_dir(settings, job_id) / "checkpoints" / f"step_{total:08d}.pt", reference)


def test_worker_host_killed_job_resumes_from_checkpoint(service, workers, reference) -> None:
    settings, client = service()
    host = workers.start(settings, pool="threads", concurrency=2, extra_env=STALE)
    # Slow steps: the host must die between checkpoints 10 and 20 (10 steps ≈ 3 s), whatever the load.
    job = client.submit(slow_spec("host-dies", step_s=0.3, max_restarts=1))
    # A second job on the same host, with no restarts allowed: losing its host is not its failure, so
    # it resumes too, without spending a restart (issue 10: host losses are counted apart).
    once = client.submit(slow_spec("no-restarts", nproc=1, max_steps=400, max_restarts=0))
    client.wait(once["id"], lambda j: j["status"] == "running", 120, "running")
    # The trainer's own record of checkpoint 10 (the API's step follows the file about a second later).
    wait_step_written(run_dir(settings, job["id"]), 10, 120, "checkpoint")
    victims = [p.pid for p in job_processes(workers.marker, job["id"])]
    victims += [p.pid for p in job_processes(workers.marker, once["id"])]
    # The host dies: the worker, its pool, torchrun and every rank at the same moment.
    workers.stop(host, signal.SIGKILL)
    kill_all(victims)
    wait(lambda: not [p for p in victims if alive(p)], 10, "the killed processes to be gone")

    workers.start(settings, pool="threads", concurrency=2, extra_env=STALE)  # a worker is back
    done = client.wait_terminal(job["id"], 150)
    assert done["status"] == "succeeded" and done["attempt"] == 2, done
    resumed = [e for e in events(run_dir(settings, job["id"])) if e["type"] == "started"]
    assert [e["start_step"] for e in resumed] == [0, 10], "attempt 2 must resume from the latest checkpoint (step 10)"
    _assert_complete_and_exact(client, settings, job["id"], reference)

    back = client.wait(once["id"], lambda j: j["attempt"] == 2 and j["status"] == "running", 60, "resumed")
    assert back["host_losses"] == 1 and back["restarts_used"] == 0, back
    client.http.post(f"/jobs/{once['id']}/cancel")
    assert client.wait_terminal(once["id"], 60)["status"] == "cancelled"


def test_worker_sigterm_checkpoints_and_resumes_elsewhere(service, workers, reference) -> None:
    settings, client = service(cancel_grace_s=15.0)
    first = workers.start(settings, pool="threads", concurrency=1, name="first@%h")
    job = client.submit(slow_spec("deploy", step_s=0.2))  # 27 steps (≥ 5 s) left after step 13: still training
    wait_step_written(run_dir(settings, job["id"]), 13, 120)  # the trainer's record; the API's step lags it
    t0 = time.monotonic()
    first.send_signal(signal.SIGTERM)  # a deploy: Celery's warm shutdown of the worker process
    first.wait(timeout=30)
    took = time.monotonic() - t0
    back = client.job(job["id"])
    assert back["status"] == "queued", back
    assert took < settings.cancel_grace_s, f"the worker took {took:.1f} s to hand the job back"
    stopped = [e for e in events(run_dir(settings, job["id"])) if e["type"] == "stopped"]
    assert len(stopped) == 1 and stopped[0]["step"] > 13, stopped  # checkpointed past the last step we saw
    stop_step = stopped[0]["step"]
    ckpts = {c["step"] for c in client.http.get(f"/jobs/{job['id']}/checkpoints").json()}
    assert stop_step in ckpts, (stop_step, ckpts)

    workers.start(settings, pool="threads", concurrency=1, name="second@%h")  # elsewhere
    done = client.wait_terminal(job["id"], 150)
    assert done["status"] == "succeeded" and done["attempt"] == 2, done
    starts = [e["start_step"] for e in events(run_dir(settings, job["id"])) if e["type"] == "started"]
    assert starts == [0, stop_step], "attempt 2 resumes from the SIGTERM checkpoint, losing no step"
    assert f"job {job['id']}" in workers.log(1) or str(job["id"]) in workers.log(1)
    _assert_complete_and_exact(client, settings, job["id"], reference)
    assert not job_processes(workers.marker, job["id"])
