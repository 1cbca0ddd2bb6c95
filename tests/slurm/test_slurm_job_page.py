"""What a user reads of a job of a Slurm pool on a real Slurm (tests/slurm/cluster.py): its partition, its node
list, Slurm's state in words and, while it waits, Slurm's reason — through REST (what the job page reads) and
`rankzero show` (cli/views.py `show_table`)."""

from __future__ import annotations

import io
import re
from typing import Any

import pytest
from fastapi.testclient import TestClient
from rich.console import Console

from api.app import create_app
from cli.views import show_table
from tests.slurm.cluster import SlurmCluster
from tests.slurm.driving import TERMINAL, drive, submit
from tests.support.jobs import slow_spec
from worker.slurm.agent import Agent

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]


def shown(job: dict[str, Any]) -> str:
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(show_table(job))
    return out.getvalue()


def test_partition_nodes_and_slurms_words_while_it_waits_runs_and_ends(
    agent: Agent, slurm_cluster: SlurmCluster, auth_headers: dict[str, str]
) -> None:
    # Both nodes held whole by a job of the same partition: ours waits for resources.
    blocker = slurm_cluster.run(
        "sbatch", "--parsable", "-p", "low", "-N2", "--ntasks-per-node=2", "--output=/dev/null", "--wrap", "sleep 60"
    ).strip()
    try:
        job_id = submit(agent, slow_spec("shown", step_s=0.2, max_steps=400, every=100))
        waiting = drive(agent, job_id, lambda j: j.backend_state == "PENDING" and "resources" in str(j.pending_reason))
        slurm_id = waiting.backend_job_id
        with TestClient(create_app(agent.settings), headers=auth_headers) as client:
            body = client.get(f"/api/jobs/{job_id}").json()
            assert body["status"] == "starting" and body["backend_job_id"] == slurm_id
            assert body["backend_partition"] == "low" and body["backend_nodes"] is None
            assert body["backend_state"] == "PENDING"
            assert body["pending_reason"] == f"Slurm job {slurm_id}: waiting for resources in partition low"
            assert body["backend_state_words"] == body["pending_reason"]
            text = shown(body)
            assert re.search(rf"Slurm job +{slurm_id} *\n", text) and re.search(r"partition +low *\n", text), text
            assert "waiting for resources in partition low" in text

            slurm_cluster.run("scancel", blocker)
            running = drive(agent, job_id, lambda j: j.status.value == "running" and j.backend_nodes is not None)
            assert running.backend_state == "RUNNING" and running.backend_nodes in ("n1", "n2")
            body = client.get(f"/api/jobs/{job_id}").json()
            assert body["backend_nodes"] == running.backend_nodes and body["pending_reason"] is None
            words = f"Slurm job {slurm_id}: running on {running.backend_nodes} in partition low"
            assert body["backend_state_words"] == words
            text = shown(body)
            assert re.search(rf"nodes +{re.escape(running.backend_nodes)} *\n", text) and words in text, text

            client.post(f"/api/jobs/{job_id}/cancel").raise_for_status()
            ended = drive(agent, job_id, lambda j: j.status in TERMINAL, timeout=90)
            assert ended.status.value == "cancelled"
            body = client.get(f"/api/jobs/{job_id}").json()
            assert body["backend_state"] == "CANCELLED" and body["backend_nodes"] == running.backend_nodes
            assert body["backend_state_words"] == f"Slurm job {slurm_id}: cancelled"
    finally:
        slurm_cluster.run("scancel", blocker, check=False)
