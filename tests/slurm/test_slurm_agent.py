"""The agent's periods against a stand-in for Slurm's commands (what `squeue` says is scripted): the row follows
Slurm — waiting with Slurm's reason, a requeue seen only as a higher restart count (even before the agent saw
it run), a job Slurm stops listing kept as it is, a completion without the trainer's `finished` refused."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
from sqlmodel import Session

from core import jobs
from core.db import get_engine
from core.migrate import upgrade
from core.tables import JobStatus
from worker.slurm.agent import Agent
from worker.slurm.commands import SlurmError

pytestmark = pytest.mark.xdist_group("slurm")

S = JobStatus
SPEC = {"name": "digits", "nproc": 2, "max_steps": 5, "device": "cpu", "data": {"name": "digits"}}


class FakeSlurm:
    """Answers sbatch with job 41 and squeue with `self.line` (None: not listed); sacct: accounting off."""

    def __init__(self) -> None:
        self.line: str | None = None
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str], stdin: str | None = None) -> str:
        self.calls.append(list(argv))
        tool = argv[0]
        if tool == "sbatch":
            return "41\n"
        if tool == "squeue":
            return f"{self.line}\n" if self.line else ""
        if tool == "sacct":
            raise SlurmError("sacct: Slurm accounting storage is disabled")
        return ""


def test_the_row_follows_slurm(api_settings: Callable[..., Any]) -> None:
    settings = api_settings(slurm_pool="cluster", slurm_partition="low")
    upgrade(settings.resolved_database_url)
    fake = FakeSlurm()
    agent = Agent(get_engine(settings.resolved_database_url), settings, fake)  # type: ignore[arg-type]
    with Session(agent.engine) as s:
        job_id = jobs.create(s, "digits", SPEC, "cluster").id
    assert job_id is not None

    def row() -> Any:
        job = jobs.get_job(agent.engine, job_id)
        assert job is not None
        return job

    agent.step()  # submitted: sbatch once, its id recorded, not listed yet → kept waiting
    assert [c[0] for c in fake.calls].count("sbatch") == 1
    job = row()
    assert (job.status, job.attempt, job.backend_job_id) == (S.starting, 1, "41")
    script = (settings.resolved_runs_dir / f"job_{job_id}" / "slurm_attempt_1.sbatch").read_text()
    assert "#SBATCH --partition=low" in script and "#SBATCH --ntasks-per-node=2" in script

    fake.line = "41|PENDING|Resources||low|0|N/A||"
    agent.step()
    job = row()
    assert job.pending_reason == "Slurm job 41: waiting for resources in partition low"
    assert (job.backend_partition, job.backend_nodes, job.backend_state) == ("low", None, "PENDING")
    assert job.backend_state_words == job.pending_reason

    # Requeued before the agent ever saw it run (preempted at once, or the agent was away): back in the queue,
    # waiting in Slurm's, until Slurm runs attempt 2.
    fake.line = "41|PENDING|BeginTime||low|1|2026-11-25T14:02:00||"
    agent.step()
    job = row()
    assert (job.status, job.attempt, job.backend_job_id) == (S.queued, 1, "41")
    assert job.pending_reason == (
        "Slurm job 41: requeued (restart 1, attempt 2); waiting for its begin time, eligible at 14:02"
    )

    fake.line = "41|RUNNING|None|n[1-2]|low|1|2026-11-25T14:02:05|0|"
    agent.step()
    job = row()
    assert (job.status, job.attempt, job.pending_reason) == (S.running, 2, None)
    assert (job.backend_partition, job.backend_nodes, job.backend_state) == ("low", "n[1-2]", "RUNNING")
    assert job.backend_state_words == "Slurm job 41: running on n[1-2] in partition low"

    fake.line = None  # Slurm does not list it, sacct is off: nothing is concluded
    for _ in range(3):
        agent.step()
    assert row().status is S.running

    fake.line = "41|COMPLETED|None|n[1-2]|low|1|2026-11-25T14:02:05|0|"
    agent.step()
    job = row()
    assert job.status is S.failed  # Slurm says completed, but the trainer's record is not there
    assert (job.backend_state, job.backend_nodes) == ("COMPLETED", "n[1-2]")
    assert job.error is not None and "events.jsonl is missing" in job.error
    assert [c[0] for c in fake.calls].count("sbatch") == 1  # never submitted twice
