"""Changing a queued job's priority (the scheduler orders the queue by priority, then age)."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, status

from api.auth import may_change_job
from api.deps import CurrentUser, JobId, SessionDep, SettingsDep, job_or_404
from api.models import JobPublic, PriorityChange
from api.routes.jobs import check_priority_ceiling, public_job
from core import audit, jobs, wake

router = APIRouter(tags=["jobs"])


@router.patch("/jobs/{job_id}", response_model=JobPublic, responses={409: {"description": "The job is not queued."}})
def change_priority(
    job_id: JobId, change: PriorityChange, session: SessionDep, settings: SettingsDep, who: CurrentUser
) -> JobPublic:
    """Set a queued job's priority (higher first; -1000 … 1000). A started job keeps its place. Members
    change their own jobs' only; admins any."""
    job = job_or_404(session, job_id)
    may_change_job(who, job.owner_id, job_id, "job.priority")
    check_priority_ceiling(session, who, change.priority)
    before = job.priority
    if not jobs.set_priority(session, job_id, change.priority):
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            f"job {job_id} is {job.status.value}: only a queued job's priority can change (cancel and resubmit)",
        )
    audit.record(session, who, "job.priority", f"job {job_id}", f"{before} -> {change.priority}")
    session.commit()
    wake.notify(settings)  # the queue's order changed
    session.refresh(job)
    return public_job(session, job)
