"""Pools through the API (issue 35 part 3): one API, with nothing set per pool, serves a hosts pool with GPUs, a
hosts pool of CPUs and a Slurm pool its agent registered. A spec names its pool; an unknown one is refused naming
those that exist; capacity is checked in the job's own pool; the pool is on the job (REST) and on the row the
scheduler, the workers and the agent go by; a worker never claims another pool's job."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from core import hosts, jobs
from core.db import get_engine
from core.settings import Settings
from core.tables import JobStatus
from worker.slurm import rows
from worker.slurm.commands import parse_sinfo

SINFO = "n1|low*|idle|none|4|(null)\nn2|low*|idle|none|4|(null)\nn1|high|idle|none|4|(null)\n"


def _register(settings: Settings, name: str, pool: str, gpus: list[str], slots: int) -> None:
    hosts.register(settings.model_copy(update={"host_name": name, "queue": pool, "cpu_slots": slots}), gpus)


def _pools(settings: Settings) -> None:
    """Host a1 in pool gpu-a (2 GPUs), host b1 in pool cpu-b (4 CPU slots), Slurm pool cluster (partition low:
    2 nodes), as their workers and agent register them; the API's own RANKZERO_QUEUE is 'rankzero'."""
    _register(settings, "a1", "gpu-a", ["0", "1"], 8)
    _register(settings, "b1", "cpu-b", [], 4)
    engine = get_engine(settings.resolved_database_url)
    rows.register_pool(engine, "cluster", None)  # before its first sinfo: Slurm's default partition not known yet
    nodes = parse_sinfo(SINFO)
    rows.replace_nodes(engine, "cluster", nodes)
    rows.register_pool(engine, "cluster", "low")  # what the agent registers once sinfo marked 'low*' the default


def _refusal(answer: Any) -> tuple[list[str], str]:
    assert answer.status_code == 422, answer.text
    detail = answer.json()["detail"][0]
    return detail["loc"], detail["msg"]


def test_one_api_serves_a_hosts_pool_and_a_slurm_pool(
    client: TestClient, settings: Settings, spec: dict[str, Any]
) -> None:
    _pools(settings)
    cpu = {**spec, "device": "cpu", "nproc": 2}

    # an unknown pool: 422 naming the pools that exist and the nearest name
    loc, msg = _refusal(client.post("/api/jobs", json={**cpu, "pool": "cpu-bx"}))
    assert loc == ["body", "pool"]
    assert "no pool 'cpu-bx': the pools are 'cluster', 'cpu-b', 'gpu-a', 'rankzero'" in msg
    assert "did you mean 'cpu-b'?" in msg

    # capacity per pool: cpu-b has one host of 4 slots and no GPU; gpu-a has one host of 2 GPUs
    loc, msg = _refusal(client.post("/api/jobs", json={**cpu, "pool": "cpu-b", "nnodes": 2}))
    assert loc == ["body", "nnodes"] and "pool 'cpu-b' has" in msg
    loc, msg = _refusal(client.post("/api/jobs", json={**cpu, "pool": "cpu-b", "device": "cuda"}))
    assert "no host of pool 'cpu-b' has a GPU" in msg
    loc, msg = _refusal(client.post("/api/jobs", json={**cpu, "pool": "gpu-a", "device": "cuda", "nproc": 4}))
    assert "largest host of pool 'gpu-a'" in msg
    on_gpus = client.post("/api/jobs", json={**cpu, "pool": "gpu-a", "device": "cuda", "nproc": 2})
    assert on_gpus.status_code == 201, on_gpus.text
    assert on_gpus.json()["pool"] == "gpu-a" and on_gpus.json()["spec"]["pool"] == "gpu-a"

    # the Slurm pool, through the same API: no hosts of rankzero's, its partition's nodes bound nnodes
    on_slurm = client.post("/api/jobs", json={**cpu, "pool": "cluster", "nnodes": 2, "nproc": 8})
    assert on_slurm.status_code == 201, on_slurm.text
    loc, msg = _refusal(client.post("/api/jobs", json={**cpu, "pool": "cluster", "nnodes": 3}))
    assert loc == ["body", "nnodes"] and "partition 'low' of Slurm pool 'cluster' has 2" in msg
    big = {**cpu, "pool": "cluster", "nnodes": 3, "slurm": {"partition": "high"}}  # 'high' has 1 node
    assert "partition 'high'" in _refusal(client.post("/api/jobs", json=big))[1]

    # no pool: the API's own RANKZERO_QUEUE, as before; the stored spec names it
    plain = client.post("/api/jobs", json=cpu)
    assert plain.status_code == 201, plain.text
    assert plain.json()["pool"] == "rankzero" and plain.json()["spec"]["pool"] == "rankzero"

    engine = get_engine(settings.resolved_database_url)
    for answer, pool in ((on_gpus, "gpu-a"), (on_slurm, "cluster"), (plain, "rankzero")):
        job_id = answer.json()["id"]
        row = jobs.get_job(engine, job_id)
        assert row is not None and row.queue == pool  # what placement, the workers and the agent go by
        assert client.get(f"/api/jobs/{job_id}").json()["pool"] == pool
    listed = {j["id"]: j["pool"] for j in client.get("/api/jobs").json()["items"]}
    assert listed[on_slurm.json()["id"]] == "cluster" and listed[on_gpus.json()["id"]] == "gpu-a"

    # the agent takes the Slurm pool's job; the scheduler, with nothing set, leaves it alone
    from worker.scheduler import _read

    waiting = {w.job_id: w.pool for w in _read(engine, settings).waiting}
    assert on_slurm.json()["id"] not in waiting and waiting[on_gpus.json()["id"]] == "gpu-a"
    assert rows.queued(engine, "cluster") == [on_slurm.json()["id"]]
    # running on Slurm, its 2 nodes × 8 ranks count for its owner's quota and fair share (nothing is placed)
    slurm_id = on_slurm.json()["id"]
    assert rows.claim(engine, slurm_id, None, settings.resolved_runs_dir, "cluster", "handed to Slurm")
    assert rows.mark_running(engine, slurm_id, 1, "running on n[1-2]")
    held = {u.job_id: u for u in _read(engine, settings).usage}
    assert [(n.host, n.slots) for n in held[slurm_id].nodes] == [("slurm:cluster", 8)] * 2
    assert held[slurm_id].owner == on_slurm.json()["owner_id"] is not None


def test_a_retried_submit_without_a_pool_is_the_same_job(client: TestClient, spec: dict[str, Any]) -> None:
    """The stored spec names the pool it resolved; a retry of the same body (no pool) is still a replay."""
    body = {**spec, "device": "cpu"}
    first = client.post("/api/jobs", json=body, headers={"Idempotency-Key": "pools-retry-1"})
    again = client.post("/api/jobs", json=body, headers={"Idempotency-Key": "pools-retry-1"})
    assert first.status_code == 201 and again.status_code == 200, again.text
    assert again.json()["id"] == first.json()["id"]


def test_a_worker_never_claims_another_pools_job(client: TestClient, settings: Settings, spec: dict[str, Any]) -> None:
    """A message for a job of pool cpu-b reaching a host of pool gpu-a (a stray, a misrouted queue) is a no-op."""
    from worker.supervise import run_node

    _pools(settings)
    made = client.post("/api/jobs", json={**spec, "device": "cpu", "pool": "cpu-b"})
    assert made.status_code == 201, made.text
    job_id = made.json()["id"]
    worker = settings.model_copy(update={"host_name": "a1", "queue": "gpu-a"})
    said = run_node(job_id, 0, "placement-of-another-pool", worker)
    assert said == f"job {job_id}: of pool 'cpu-b', and this host serves pool 'gpu-a'; nothing to do"
    row = jobs.get_job(get_engine(settings.resolved_database_url), job_id)
    assert row is not None and row.status == JobStatus.queued and row.attempt == 0 and row.worker_host is None
