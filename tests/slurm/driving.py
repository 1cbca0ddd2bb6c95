"""Driving the Slurm agent from a test: submit a job to its pool, run its periods until the row says something,
read the timeline and the final checkpoint."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from sqlmodel import Session, col, select

from core import jobs
from core.tables import Job, JobStatus, JobTransition
from tests.slurm.conftest import run_dir
from worker.slurm.agent import Agent

S = JobStatus
TERMINAL = {S.succeeded, S.failed, S.cancelled}


def submit(agent: Agent, spec: dict[str, Any]) -> int:
    with Session(agent.engine) as s:
        job = jobs.create(s, spec["name"], spec, agent.pool)
        assert job.id is not None
        return job.id


def drive(agent: Agent, job_id: int, until: Any, timeout: float = 240) -> Job:
    """Run the agent's periods (in this process) until `until(job)` holds; the job row then."""
    deadline = time.monotonic() + timeout
    while True:
        agent.step()
        job = jobs.get_job(agent.engine, job_id)
        assert job is not None
        if until(job):
            return job
        if time.monotonic() > deadline:
            log = run_dir(agent.settings, job_id) / "logs" / "slurm_batch.log"
            said = log.read_text() if log.exists() else ""
            raise AssertionError(f"job {job_id} stayed {job.status.value} ({timeline(agent, job_id)}): {said}")
        time.sleep(agent.settings.slurm_poll_s)


def timeline(agent: Agent, job_id: int) -> list[tuple[str, int, str]]:
    with Session(agent.engine) as s:
        rows = s.exec(select(JobTransition).where(JobTransition.job_id == job_id).order_by(col(JobTransition.id))).all()
        return [(r.status.value, r.attempt, r.detail or "") for r in rows]


def final_checkpoint(agent: Agent, job_id: int, steps: int) -> Path:
    return run_dir(agent.settings, job_id) / "checkpoints" / f"step_{steps:08d}.pt"


def upload(settings: Any, project: Path) -> str:
    """`project` packed and stored as a code bundle (as PUT /api/code does); its `code` spec value."""
    from core import bundles

    tmp = bundles.incoming(settings)
    packed = bundles.pack(project, tmp)
    bundles.store(settings, tmp, packed.sha256)
    return f"sha256:{packed.sha256}"
