"""A node that fails mid-run, as the agent's periods see it through a stand-in for Slurm's commands: Slurm requeues
the job and holds it PENDING for the dead node while the old allocation is still COMPLETING. The job is `queued`
with Slurm's reason, the node is named in its timeline, the COMPLETING never reads as the new attempt starting, and
only Slurm's RUNNING makes it `running` (attempt 2). A job cancelled while it waits so is cancelled in Slurm too."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
from sqlmodel import Session, col, select

from core import jobs
from core.db import get_engine
from core.migrate import upgrade
from core.tables import Job, JobStatus, JobTransition
from worker.slurm.agent import Agent
from worker.slurm.commands import SlurmError

pytestmark = pytest.mark.xdist_group("slurm")

S = JobStatus
SPEC = {"name": "digits", "nproc": 2, "nnodes": 2, "max_steps": 5, "device": "cpu", "data": {"name": "digits"}}
DOWN = "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions"


class FakeSlurm:
    """sbatch → job 41; squeue → `self.line`; sacct -D → the job's records (NODE_FAIL on n[1-2], then pending);
    sinfo → n2 down and not responding."""

    def __init__(self) -> None:
        self.line: str | None = None
        self.calls: list[list[str]] = []
        self.accounting = True

    def __call__(self, argv: Sequence[str], stdin: str | None = None) -> str:
        self.calls.append(list(argv))
        tool = argv[0]
        if tool == "sbatch":
            return "41\n"
        if tool == "squeue":
            return f"{self.line}\n" if self.line and "-n" not in argv else ""
        if tool == "sacct" and not self.accounting:
            raise SlurmError("sacct: Slurm accounting storage is disabled")
        if tool == "sacct" and "-D" in argv:
            return (
                "41|NODE_FAIL|None|n[1-2]|low|0:0|2026-12-07T05:00:00\n"
                "41|PENDING|BeginTime|None assigned|low|0:0|Unknown\n"
            )
        if tool == "sacct":
            return ""
        if tool == "sinfo":
            return "n1|low*|idle|none|2|(null)\nn2|low*|down*|Not responding|2|(null)\n"
        return ""


@pytest.fixture
def agent(api_settings: Callable[..., Any]) -> Agent:
    settings = api_settings(slurm_pool="cluster", slurm_partition="low")
    upgrade(settings.resolved_database_url)
    return Agent(get_engine(settings.resolved_database_url), settings, FakeSlurm())  # type: ignore[arg-type]


def submitted_and_running(agent: Agent) -> int:
    with Session(agent.engine) as s:
        job_id = jobs.create(s, "digits", SPEC, "cluster").id
    assert job_id is not None
    fake = agent.run
    assert isinstance(fake, FakeSlurm)
    agent.step()
    fake.line = "41|RUNNING|None|n[1-2]|low|0|2026-12-07T05:00:00|0|"
    agent.step()
    assert row(agent, job_id).status is S.running
    return job_id


def row(agent: Agent, job_id: int) -> Job:
    job = jobs.get_job(agent.engine, job_id)
    assert job is not None
    return job


@pytest.mark.parametrize("accounting", [True, False], ids=["sacct", "no-accounting"])
def test_a_node_that_fails_leaves_the_job_queued_with_the_node_named_until_slurm_runs_it(
    agent: Agent, accounting: bool
) -> None:
    """With accounting, sacct's NODE_FAIL record names the allocation; without, the nodes the attempt ran on that
    sinfo shows down (the agent sees only COMPLETING, then PENDING)."""
    fake = agent.run
    assert isinstance(fake, FakeSlurm)
    fake.accounting = accounting
    job_id = submitted_and_running(agent)

    fake.line = f"41|PENDING|{DOWN}|(null)|low|1|Unknown||"  # requeued after the node failure, held for n2
    agent.step()
    job = row(agent, job_id)
    assert (job.status, job.attempt, job.backend_job_id) == (S.queued, 1, "41")
    assert job.pending_reason == f"Slurm job 41: requeued (restart 1, attempt 2); waiting in Slurm's queue ({DOWN})"
    with Session(agent.engine) as s:
        details = s.exec(select(JobTransition.detail).where(col(JobTransition.job_id) == job_id)).all()
    assert (
        "requeued by Slurm after node n2 (Not responding) failed: resumes from its newest checkpoint as attempt 2"
        in details
    )

    # The old allocation's COMPLETING (the same restart count): never the new attempt starting.
    fake.line = "41|COMPLETING|None|n[1-2]|low|1|2026-12-07T05:00:00||"
    for _ in range(2):
        agent.step()
        job = row(agent, job_id)
        assert (job.status, job.attempt) == (S.queued, 1)
        assert job.pending_reason is not None and "previous allocation on n[1-2] to complete" in job.pending_reason

    fake.line = f"41|PENDING|{DOWN}|(null)|low|1|Unknown||"
    agent.step()
    assert row(agent, job_id).status is S.queued
    assert not [c for c in fake.calls if c[0] == "sbatch"][1:]  # never submitted again: Slurm holds it

    fake.line = "41|RUNNING|None|n[1,3]|low|1|2026-12-07T05:09:00|0|"
    agent.step()
    job = row(agent, job_id)
    assert (job.status, job.attempt, job.pending_reason) == (S.running, 2, None)
    assert job.backend_nodes == "n[1,3]"


def test_a_job_cancelled_while_queued_in_slurm_is_cancelled_there(agent: Agent) -> None:
    job_id = submitted_and_running(agent)
    fake = agent.run
    assert isinstance(fake, FakeSlurm)
    fake.line = f"41|PENDING|{DOWN}|(null)|low|1|Unknown||"
    agent.step()
    assert row(agent, job_id).status is S.queued
    with Session(agent.engine) as s:  # as POST /api/jobs/{id}/cancel does a queued job: at once
        assert jobs.transition(s, job_id, S.cancelled, expect=S.queued, detail="cancel requested")
        s.commit()
    agent.step()
    assert ["scancel", "41"] in fake.calls
    assert row(agent, job_id).status is S.cancelled
