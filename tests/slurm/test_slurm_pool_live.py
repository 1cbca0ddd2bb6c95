"""One API serves a hosts pool and a Slurm pool at once, on a real Slurm (tests/slurm/cluster.py: n1, n2 in
partition low, Slurm's default), following docs/slurm.md with nothing else set (issue 35 part 3): the API has
no RANKZERO_SLURM_POOL; the agent, with RANKZERO_SLURM_POOL=cluster, registers its pool; a spec with
`pool: cluster` is taken, and runs on two Slurm nodes, while the hosts pool's capacity is its own hosts'."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from core import hosts
from core.tables import JobStatus
from tests.slurm.driving import TERMINAL, drive, timeline
from worker.slurm.agent import Agent

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]
S = JobStatus
SPEC = {"name": "on-slurm", "nproc": 1, "nnodes": 2, "max_steps": 6, "batch_size": 16, "device": "cpu",
        "data": {"name": "digits"}, "model": {"name": "mlp"}}  # fmt: skip


@pytest.fixture
def slurm_settings(api_settings: Callable[..., Any], slurm_env: dict[str, str]) -> Any:
    """The agent's settings as docs/slurm.md "Running the agent" has them: the pool `cluster`, Slurm's default
    partition (the agent finds it with sinfo). The same database and runs dir as the API's."""
    return api_settings(slurm_pool="cluster", slurm_poll_s=0.3, slurm_signal_margin_s=60)


def test_pool_cluster_runs_on_slurm_through_the_api_that_serves_a_hosts_pool(
    agent: Agent, api_settings: Callable[..., Any], auth_headers: dict[str, str]
) -> None:
    api = api_settings()  # RANKZERO_QUEUE 'rankzero' (the hosts pool), nothing about Slurm
    assert api.slurm_pool is None
    hosts.register(api.model_copy(update={"host_name": "box-a", "cpu_slots": 2}), [])  # the hosts pool's one host
    with TestClient(create_app(api), headers=auth_headers) as client:
        before = client.post("/api/jobs", json={**SPEC, "pool": "cluster"})
        assert before.status_code == 422 and "no pool 'cluster': the pools are 'rankzero'" in before.text

        agent.step()  # the agent's first period: it registers its pool and lists the nodes
        job = client.post("/api/jobs", json={**SPEC, "pool": "cluster"})
        assert job.status_code == 201, job.text
        job_id = job.json()["id"]
        # the same 2-node spec in the hosts pool, which has one host: refused there, by that pool's capacity
        on_hosts = client.post("/api/jobs", json=SPEC)
        assert on_hosts.status_code == 422 and "pool 'rankzero' has 1" in on_hosts.text, on_hosts.text
        too_big = client.post("/api/jobs", json={**SPEC, "pool": "cluster", "nnodes": 3})
        assert "partition 'low' of Slurm pool 'cluster' has 2" in too_big.text, too_big.text

        row = drive(agent, job_id, lambda j: j.status in TERMINAL)
        assert row.status is S.succeeded, (row.error, timeline(agent, job_id))
        shown = client.get(f"/api/jobs/{job_id}").json()
        assert shown["pool"] == "cluster" and shown["worker_host"] == "slurm:cluster"
        assert shown["backend_job_id"] and shown["backend_nodes"] == "n[1-2]" and shown["step"] == SPEC["max_steps"]
