"""Writing how an attempt ended: succeeded, cancelled, failed (with rank, exit code, traceback) or
back to the queue (a restart within max_restarts, or a worker shutting down)."""

from __future__ import annotations

from sqlalchemy.engine import Engine
from sqlmodel import Session

from api.job_state import transition
from api.tables import Job, JobStatus

S = JobStatus
LIVE = {S.starting, S.running, S.cancelling}


def finish(engine: Engine, job_id: int, to: JobStatus, detail: str | None = None, **fields: object) -> bool:
    with Session(engine) as s:
        won = transition(s, job_id, to, expect=LIVE & {src for src in LIVE if _legal(src, to)}, detail=detail, pid=None, **fields)
        s.commit()
        return won


def requeue(engine: Engine, job_id: int, detail: str, **fields: object) -> bool:
    """running/starting → queued (heartbeat cleared) so some worker picks it up again."""
    with Session(engine) as s:
        won = transition(s, job_id, S.queued, expect={S.starting, S.running}, detail=detail, pid=None, heartbeat_at=None, **fields)
        s.commit()
        return won


def _legal(src: JobStatus, to: JobStatus) -> bool:
    from api.job_state import ALLOWED

    return to in ALLOWED[src]


def get_job(engine: Engine, job_id: int) -> Job | None:
    with Session(engine) as s:
        job = s.get(Job, job_id)
        if job is not None:
            s.expunge(job)
        return job
