"""Housekeeping of finished experiments (issue 23): archive (hidden from the default list), delete (the row,
its metrics and checkpoints rows, and its run dir with checkpoints and artifacts; refused until the job
has ended), tags and a note. Members do it to their own jobs, admins to any."""

from __future__ import annotations

import shutil

from fastapi import APIRouter, HTTPException, Response, status
from sqlalchemy.exc import IntegrityError

from api.auth import may_change_job
from api.deps import CurrentUser, JobId, SessionDep, SettingsDep, job_or_404
from api.models import ErrorDetail, JobPublic
from api.models_team import JobAnnotations
from api.routes.jobs import public_job
from core import audit
from core.paths import UnsafePath, run_dir_of
from core.tables import Job

router = APIRouter(tags=["jobs"])


def _answer(session: SessionDep, job: Job) -> JobPublic:
    session.refresh(job)
    return public_job(session, job)


def _archive(job_id: int, session: SessionDep, who: CurrentUser, archived: bool) -> JobPublic:
    job = job_or_404(session, job_id)
    may_change_job(who, job.owner_id, job_id, "job.archive")
    job.archived = archived
    session.add(job)
    audit.record(session, who, "job.archive" if archived else "job.unarchive", f"job {job_id}")
    session.commit()
    return _answer(session, job)


@router.post("/jobs/{job_id}/archive", response_model=JobPublic, responses={403: {"model": ErrorDetail}})
def archive_job(job_id: JobId, session: SessionDep, who: CurrentUser) -> JobPublic:
    """Hide the job from the default list (GET /api/jobs?archived=true lists archived jobs)."""
    return _archive(job_id, session, who, True)


@router.post("/jobs/{job_id}/unarchive", response_model=JobPublic, responses={403: {"model": ErrorDetail}})
def unarchive_job(job_id: JobId, session: SessionDep, who: CurrentUser) -> JobPublic:
    return _archive(job_id, session, who, False)


@router.patch("/jobs/{job_id}/annotations", response_model=JobPublic, responses={403: {"model": ErrorDetail}})
def annotate_job(job_id: JobId, body: JobAnnotations, session: SessionDep, who: CurrentUser) -> JobPublic:
    """Set the job's tags and/or note (only the fields sent change)."""
    job = job_or_404(session, job_id)
    may_change_job(who, job.owner_id, job_id, "job.edit")
    changes = body.model_dump(exclude_unset=True)
    if "tags" in changes:
        job.tags = sorted(set(changes["tags"] or []))
    if "note" in changes:
        job.note = (changes["note"] or "").strip() or None
    session.add(job)
    audit.record(session, who, "job.edit", f"job {job_id}", ", ".join(sorted(changes)))
    session.commit()
    return _answer(session, job)


@router.delete(
    "/jobs/{job_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses={403: {"model": ErrorDetail}, 409: {"model": ErrorDetail}},
)
def delete_job(job_id: JobId, session: SessionDep, settings: SettingsDep, who: CurrentUser) -> Response:
    """Delete an ended job: its row (timeline, metrics, checkpoints rows) and its run dir. Not undoable."""
    job = job_or_404(session, job_id)
    may_change_job(who, job.owner_id, job_id, "job.delete")
    if not job.status.is_terminal:
        raise HTTPException(
            status.HTTP_409_CONFLICT, f"job {job_id} is {job.status.value}: cancel it and wait for it to end first"
        )
    try:
        run_dir = run_dir_of(job, settings)
    except UnsafePath:
        run_dir = None  # a row naming a directory outside the runs dir: never removed
    name = job.name
    session.delete(job)
    audit.record(session, who, "job.delete", f"job {job_id}", name)
    try:
        session.commit()
    except IntegrityError:
        session.rollback()
        raise HTTPException(status.HTTP_409_CONFLICT, f"job {job_id} is still referenced; try again") from None
    if run_dir is not None and run_dir != settings.resolved_runs_dir and run_dir.is_dir():
        shutil.rmtree(run_dir, ignore_errors=True)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
