"""A node lost mid-run, on a real Slurm (tests/slurm/cluster.py; issue 35): a 2-node job of partition `low` (n1, n2)
trains, n2 goes down (`scontrol update state=down`: Slurm kills the job on it and requeues it, NODE_FAIL), and the job
waits for n2. rankzero says `queued` with Slurm's reason and names n2 in its timeline, never `running`, until n2 is
back and Slurm runs attempt 2."""

from __future__ import annotations

import os
import signal

import pytest
from sqlmodel import Session

from core import jobs
from core.tables import Job, JobStatus
from tests.slurm.cluster import NODES, SlurmCluster
from tests.slurm.conftest import run_dir
from tests.slurm.driving import TERMINAL, drive, submit, timeline
from tests.support.jobs import slow_spec, wait_step_written
from worker.slurm.agent import Agent

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]
S = JobStatus


def test_a_node_lost_mid_run_leaves_the_job_queued_with_the_node_named_until_slurm_runs_it_again(
    agent: Agent, slurm_cluster: SlurmCluster
) -> None:
    job_id = submit(agent, slow_spec("node-lost", step_s=0.2, max_steps=500, every=5, nnodes=2))
    job = drive(agent, job_id, lambda j: j.status is S.running)
    assert job.backend_nodes == "n[1-2]"
    wait_step_written(run_dir(agent.settings, job_id), 5, 120, "checkpoint")

    def waiting(j: Job) -> bool:
        return j.status is S.queued and (j.pending_reason or "").startswith(f"Slurm job {j.backend_job_id}: requeued")

    # n2 crashes: its slurmd stops answering (SIGSTOP: it never re-registers meanwhile, as a dead node would not),
    # and Slurm takes the node down at once rather than after SlurmdTimeout
    slurmd_n2 = slurm_cluster.pids[2 + NODES.index("n2")]  # munged, slurmctld, then the slurmd of each node
    try:
        os.kill(slurmd_n2, signal.SIGSTOP)
        slurm_cluster.run("scontrol", "update", "nodename=n2", "state=down", "reason=rankzero test: node lost")
        job = drive(agent, job_id, waiting, timeout=120)
        assert job.attempt == 1
        named = [d for s, a, d in timeline(agent, job_id) if s == "queued" and a == 1]
        assert named and named[0].startswith("requeued by Slurm after node n2 (rankzero test: node lost) failed"), (
            timeline(agent, job_id)
        )
        for _ in range(5):  # held for n2: queued, never running
            job = drive(agent, job_id, lambda j: True)
            assert job.status is S.queued, timeline(agent, job_id)
    finally:
        os.kill(slurmd_n2, signal.SIGCONT)
        slurm_cluster.run("scontrol", "update", "nodename=n2", "state=resume", check=False)
    job = drive(agent, job_id, lambda j: j.status is not S.queued)
    assert (job.status, job.attempt) == (S.running, 2), timeline(agent, job_id)
    with Session(agent.engine) as s:  # as POST /api/jobs/{id}/cancel does a running job
        assert jobs.transition(s, job_id, S.cancelling, expect=S.running, detail="cancel requested")
        s.commit()
    job = drive(agent, job_id, lambda j: j.status in TERMINAL, timeout=60)
    assert job.status is S.cancelled, (job.status, job.error)
