"""Drain: `POST /api/hosts/{name}/drain` (what `rankzero hosts drain` calls) stops a running job on that
host with a checkpoint, the scheduler resumes it on another host, and it ends exact; the drained host
takes nothing new until undrained. Real Celery workers posing as two hosts, torchrun, the real trainer."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.jobs import (
    USER_CODE,
    assert_same_weights,
    events,
    points,
    reference_weights,
    run_dir,
    slow_spec,
    wait,
)
from tests.support.services import DEFAULT_SETTINGS, ServiceOptions

FAST = {"RANKZERO_SCHEDULER_POLL_S": "0.2"}  # the default stale threshold: a drain is no host loss
TOTAL = 40
# The first attempt's ranks wait in step 14 until the drain's SIGTERM reaches them (tests/support/slow_model.py):
# the drain lands mid-run however late the worker acts on it, never after the run has finished by itself.
HOLD = 14


@pytest.fixture
def service_options() -> ServiceOptions:
    return ServiceOptions(
        settings={**DEFAULT_SETTINGS, "cancel_grace_s": 15.0, "allowed_code": USER_CODE}, fake_trainer=False
    )


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return reference_weights(slow_spec("ref", max_steps=TOTAL), tmp_path_factory.mktemp("reference"))


def host_of(job: dict[str, Any]) -> str:
    return job["placement"]["nodes"][0]["host"]


def test_drain_moves_a_running_job_to_another_host_from_its_checkpoint(service, workers, reference) -> None:
    settings, client = service()
    env = {**FAST, "RANKZERO_CPU_SLOTS": "4"}
    for name in ("a", "b"):
        workers.start(
            settings, pool="threads", concurrency=2, name=f"{name}@%h", extra_env={**env, "RANKZERO_HOST_NAME": name}
        )
    wait(lambda: sum(h["alive"] for h in client.http.get("/hosts").json()) == 2, 90, "hosts a and b up")
    spec = slow_spec("drained", max_steps=TOTAL)
    spec["model"]["args"]["hold_at_step"] = HOLD
    job = client.submit(spec)
    running = client.wait(job["id"], lambda j: j["step"] >= HOLD - 1, 120, f"step {HOLD - 1}")
    first = host_of(running)
    other = "b" if first == "a" else "a"

    r = client.http.post(f"/hosts/{first}/drain", json={"note": "maintenance: new disk"})
    assert r.status_code == 200 and r.json()["drain_requested"] and r.json()["draining"], r.text
    assert r.json()["drain_note"] == "maintenance: new disk"

    moved = client.wait(job["id"], lambda j: j["attempt"] == 2 and j["status"] == "running", 120, "resumed")
    assert host_of(moved) == other
    done = client.wait_terminal(job["id"], 150)
    timeline = [t["detail"] or "" for t in client.job(job["id"])["transitions"]]
    assert any(f"host {first} drained by an operator (maintenance: new disk)" in d for d in timeline), timeline
    assert done["status"] == "succeeded" and done["restarts_used"] == 0 and done["host_losses"] == 0, done
    stopped = [e for e in events(run_dir(settings, job["id"])) if e["type"] == "stopped"]
    starts = [e["start_step"] for e in events(run_dir(settings, job["id"])) if e["type"] == "started"]
    assert len(stopped) == 1 and starts == [0, stopped[0]["step"]], (stopped, starts)
    for name in ("train/loss", "lr"):
        assert points(client, job["id"], name) == list(range(1, TOTAL + 1)), f"{name}: a point duplicated or lost"
    assert_same_weights(run_dir(settings, job["id"]) / "checkpoints" / f"step_{TOTAL:08d}.pt", reference)

    # Still drained: the next job goes to the other host, though the drained one is idle.
    nxt = client.submit(slow_spec("after-drain", nproc=1, max_steps=4))
    placed = client.wait(nxt["id"], lambda j: j["placement"] is not None or j["status"] != "queued", 60, "placed")
    assert host_of(placed) == other
    assert client.wait_terminal(nxt["id"], 120)["status"] == "succeeded"

    r = client.http.post(f"/hosts/{first}/undrain")
    assert r.status_code == 200 and not r.json()["drain_requested"] and r.json()["drain_note"] is None
    assert client.http.post("/hosts/nowhere/drain").status_code == 404
