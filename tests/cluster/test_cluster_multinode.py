"""Multi-node DDP across two hosts (two workers posing as host-a and host-b): the job runs one torchrun
per host, ends at the weights of the one-node run, survives losing a host, and cancels everywhere."""

from __future__ import annotations

import signal
from typing import Any

import pytest

from tests.support.jobs import (
    assert_same_weights,
    events,
    reference_weights,
    run_dir,
    slow_spec,
    wait,
    wait_step_written,
)
from tests.support.procs import job_processes

STEPS = 20


def _spec(name: str, step_s: float = 0.05, **kw: Any) -> dict[str, Any]:
    """`step_s` changes no math: every test here ends at the one reference's weights."""
    return slow_spec(name, step_s=step_s, max_steps=STEPS, every=5, nproc=1, nnodes=2, **kw)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Weights of the same job on one node with 2 ranks (so 1 rank × accumulation 2 here)."""
    one_node = {**_spec("ref"), "nnodes": 1, "nproc": 2}
    return reference_weights(one_node, tmp_path_factory.mktemp("reference"))


def _final(settings: Any, job_id: int) -> Any:
    return run_dir(settings, job_id) / "checkpoints" / f"step_{STEPS:08d}.pt"


def test_two_node_job_runs_on_both_hosts_and_matches_one_node(service, workers, start_host, reference) -> None:
    settings, client = service()
    start_host(settings, "host-a", 1)
    start_host(settings, "host-b", 1)
    job = client.submit(_spec("two-nodes"))
    done = client.wait_terminal(job["id"], 180)
    assert done["status"] == "succeeded", (done["error"], done["transitions"])
    hosts = sorted(n["host"] for n in done["placement"]["nodes"])
    assert hosts == ["host-a", "host-b"], done["placement"]
    assert_same_weights(_final(settings, job["id"]), reference)
    started = [e for e in events(run_dir(settings, job["id"])) if e["type"] == "started"]
    assert started and started[0]["world_size"] == 2
    # Both nodes' rank logs reach the API, by global rank (node 1's local rank 0 is rank 1).
    logs = client.http.get(f"/jobs/{job['id']}/logs", params={"stream": "stderr"}).json()
    assert logs["ranks"] == [0, 1], logs


def test_rank_logs_of_every_node_are_named_by_global_rank(tmp_path) -> None:
    import json

    from trainer.run_dir import RunDir

    run = RunDir(tmp_path)
    run.spec.write_text(json.dumps({"nproc": 2}))
    for node, local in ((0, 0), (0, 1), (1, 0), (1, 1)):
        base = run.attempt_logs(1) / (f"node_{node}" if node else "") / "rankzero-9-1_x" / "attempt_0" / str(local)
        base.mkdir(parents=True)
        (base / "stderr.log").write_text(f"node {node} local {local}\n")
    found = run.rank_logs("stderr", attempt=1)
    assert sorted(found) == [0, 1, 2, 3]
    assert found[3].read_text() == "node 1 local 1\n" and run.rank_log(2, attempt=1).read_text() == "node 1 local 0\n"


def test_losing_a_host_restarts_every_node_from_the_checkpoint(service, workers, start_host, reference) -> None:
    settings, client = service()
    start_host(settings, "host-a", 1)
    b = start_host(settings, "host-b", 1)
    # Slow steps: host-b must die mid-run, after checkpoint 5 and well before step 20 (13 steps ≈ 4 s later).
    job = client.submit(_spec("host-b-dies", step_s=0.3, max_restarts=0))
    # The trainer's own record, not the API's step (it follows the file about a second later).
    rd = run_dir(settings, job["id"])
    wait_step_written(rd, 5, 120, "checkpoint")
    wait_step_written(rd, 7, 60)
    workers.stop(b, signal.SIGKILL)  # host-b's worker dies; its rank guard stops its ranks
    back = client.wait(job["id"], lambda j: j["host_losses"] == 1, 60, "the host loss to be recorded")
    assert back["restarts_used"] == 0, back
    start_host(settings, "host-b", 1)  # the host comes back: the job is placed on both again
    done = client.wait_terminal(job["id"], 180)
    assert done["status"] == "succeeded" and done["attempt"] == 2, done
    resumed = [e["start_step"] for e in events(run_dir(settings, job["id"])) if e["type"] == "started"]
    assert resumed[0] == 0 and resumed[-1] >= 5, resumed
    assert_same_weights(_final(settings, job["id"]), reference)


def test_cancel_stops_every_node(service, workers, start_host) -> None:
    settings, client = service()
    start_host(settings, "host-a", 1)
    start_host(settings, "host-b", 1)
    job = client.submit(slow_spec("cancel-two", step_s=0.1, max_steps=400, every=50, nproc=1, nnodes=2))
    wait(lambda: len(job_processes(workers.marker, job["id"])) >= 4, 90, "torchrun and a rank on both hosts")
    client.wait(job["id"], lambda j: j["step"] >= 2, 90, "training")
    assert client.http.post(f"/jobs/{job['id']}/cancel").status_code in (200, 202)
    done = client.wait_terminal(job["id"], 60)
    assert done["status"] == "cancelled", done
    wait(lambda: not job_processes(workers.marker, job["id"]), 30, "no process of the job on either host")
