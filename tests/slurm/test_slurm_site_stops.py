"""The site's word is final (issue 39), on a real Slurm (tests/slurm/cluster.py): a job Slurm cancels that rankzero
did not ask for ends `cancelled` with Slurm's reason and is never submitted again, running or pending; an admin's
`scontrol requeue` is named as such (not a preemption), and an admin's hold is left to the admin.

Preemption and the time-limit warning still requeue and resume exactly: tests/slurm/test_slurm_requeue.py."""

from __future__ import annotations

import pytest

from core import jobs
from core.tables import JobStatus
from tests.slurm.cluster import SlurmCluster
from tests.slurm.conftest import run_dir
from tests.slurm.driving import TERMINAL, drive, submit, timeline
from tests.support import procs
from tests.support.jobs import slow_spec, wait, wait_step_written
from worker.slurm.agent import Agent

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]
S = JobStatus


def pool_jobs(cluster: SlurmCluster, agent: Agent) -> list[str]:
    """Every Slurm job of this test's pool Slurm still lists (any state): the one job, never a second."""
    out = cluster.run("squeue", "-h", "-t", "all", "-o", "%i %j")
    return [line.split()[0] for line in out.splitlines() if f"rankzero-{agent.pool}-" in line]


def test_scancel_of_a_running_job_ends_it_cancelled_and_it_is_not_requeued(
    agent: Agent, slurm_cluster: SlurmCluster, marker: str
) -> None:
    """Two jobs side by side (n1, n2), each with a checkpoint to resume from: one `scancel`led, one
    `scancel --signal=KILL --full`: both end cancelled, neither is requeued nor submitted again."""
    ways = {"plain": [], "kill-full": ["--signal=KILL", "--full"]}
    ids = {way: submit(agent, slow_spec(f"site-cancel-{way}", step_s=0.2, max_steps=500, every=5)) for way in ways}
    for job_id in ids.values():
        drive(agent, job_id, lambda j: j.status is S.running)
        wait_step_written(run_dir(agent.settings, job_id), 5, 120, "checkpoint")
    slurm_ids = {way: jobs.get_job(agent.engine, job_id).backend_job_id for way, job_id in ids.items()}  # type: ignore[union-attr]
    for way, options in ways.items():
        slurm_cluster.run("scancel", *options, str(slurm_ids[way]))  # the site's admin, not rankzero
    for way, job_id in ids.items():
        job = drive(agent, job_id, lambda j: j.status in TERMINAL, timeout=120)
        assert job.status is S.cancelled, (way, job.status, job.error)
        assert job.attempt == 1 and job.backend_job_id == slurm_ids[way]
        words = [d for s, _, d in timeline(agent, job_id) if s == "cancelled"]
        assert words and f"Slurm job {slurm_ids[way]}: cancelled by Slurm (scancel" in words[0], timeline(agent, job_id)
        state = slurm_cluster.run("squeue", "-h", "-t", "all", "-j", str(slurm_ids[way]), "-o", "%T").strip()
        assert state == "CANCELLED", way  # not requeued by the batch script
    for _ in range(3):  # a few more periods: nothing is submitted again
        agent.step()
    assert sorted(pool_jobs(slurm_cluster, agent)) == sorted(str(i) for i in slurm_ids.values())
    wait(lambda: not procs.processes(marker), 30, "every process of the jobs to be gone")


def test_an_admins_requeue_is_named_and_a_pending_job_slurm_cancels_is_never_submitted_again(
    agent: Agent, slurm_cluster: SlurmCluster
) -> None:
    """Running → `scontrol requeue` (the ranks checkpoint: the run's last event is `stopped`) → held by the admin
    while pending → `scancel` while pending: cancelled, and the agent does not resubmit the checkpointed job."""
    job_id = submit(agent, slow_spec("site-requeue", step_s=0.2, max_steps=500, every=5))
    job = drive(agent, job_id, lambda j: j.status is S.running)
    wait_step_written(run_dir(agent.settings, job_id), 5, 120, "checkpoint")
    slurm_id = job.backend_job_id
    assert slurm_id is not None
    slurm_cluster.run("scontrol", "requeue", slurm_id)
    # Held at once (a requeued job waits ~cred_expire before it may start): pending until the admin says.
    slurm_cluster.run("scontrol", "hold", slurm_id)
    # Waiting in Slurm's queue: back in rankzero's (issue 35), attempt 1 until Slurm runs attempt 2.
    job = drive(
        agent, job_id, lambda j: j.status is S.queued and "held by an administrator" in (j.pending_reason or "")
    )
    lines = timeline(agent, job_id)
    again = [d for s, a, d in lines if s == "queued" and a == 1]
    assert again and again[0].startswith("requeued by an administrator (scontrol requeue)"), lines
    events = (run_dir(agent.settings, job_id) / "events.jsonl").read_text()
    assert '"stopped"' in events  # checkpointed on the requeue's signal: resumable, were it not cancelled
    slurm_cluster.run("scancel", slurm_id)
    job = drive(agent, job_id, lambda j: j.status in TERMINAL, timeout=60)
    assert job.status is S.cancelled, (job.status, job.error)
    assert job.backend_job_id == slurm_id
    assert any(s == "cancelled" and "cancelled by Slurm (scancel" in d for s, _, d in timeline(agent, job_id))
    for _ in range(3):
        agent.step()
    assert pool_jobs(slurm_cluster, agent) == [slurm_id]
