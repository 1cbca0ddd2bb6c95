"""Claiming a job: the conditional UPDATE queued → starting that only one delivery can win."""

from __future__ import annotations

import socket
from pathlib import Path

from sqlalchemy import update
from sqlalchemy.engine import Engine
from sqlmodel import Session

from api.job_state import transition
from api.tables import Job, JobStatus, utcnow


def run_dir_for(runs_dir: Path, job_id: int) -> Path:
    return runs_dir / f"job_{job_id}"


def claim(engine: Engine, job_id: int, runs_dir: Path) -> Job | None:
    """Move the job queued → starting (attempt + 1) for this host; None when another delivery won."""
    with Session(engine) as s:
        won = transition(
            s, job_id, JobStatus.starting, expect=JobStatus.queued, detail=f"claimed by {socket.gethostname()}",
            attempt=Job.attempt + 1, worker_host=socket.gethostname(), heartbeat_at=utcnow(),
            run_dir=str(run_dir_for(runs_dir, job_id)), pid=None, exit_code=None, failed_rank=None,
        )  # fmt: skip
        s.commit()
        if not won:
            return None
        job = s.get(Job, job_id)
        s.refresh(job)
        s.expunge(job)
        return job


def touch_queued(engine: Engine, job_id: int) -> bool:
    """Mark a queued job as held by a waiting worker (recovery re-dispatches it if we die). False: no longer queued."""
    with engine.begin() as conn:
        result = conn.execute(
            update(Job).where(Job.id == job_id, Job.status == JobStatus.queued).values(heartbeat_at=utcnow())  # type: ignore[arg-type]
        )
        return result.rowcount == 1


def status_of(engine: Engine, job_id: int) -> JobStatus | None:
    with Session(engine) as s:
        job = s.get(Job, job_id)
        return JobStatus(job.status) if job else None


def touch_live(engine: Engine, job_id: int) -> None:
    """The heartbeat of a running job: proof for recovery that its worker is alive."""
    with engine.begin() as conn:
        conn.execute(
            update(Job).where(Job.id == job_id, Job.status.in_([JobStatus.starting, JobStatus.running, JobStatus.cancelling])).values(heartbeat_at=utcnow())  # type: ignore[attr-defined]
        )
