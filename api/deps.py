"""Dependencies shared by the route modules: the settings, a database session, a job looked up by id, and
who calls (`CurrentUser`, `Member`, `Admin`: api/auth.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, HTTPException, Path, status
from sqlmodel import Session

from api.auth import app_settings, require_action, require_auth, require_role
from core.db import get_engine
from core.settings import Settings
from core.tables import Job
from core.users import Principal

SettingsDep = Annotated[Settings, Depends(app_settings)]
CurrentUser = Annotated[Principal, Depends(require_auth)]  # anyone signed in (viewers only read: api/auth.py)
Member = Annotated[Principal, Depends(require_role("member"))]
Admin = Annotated[Principal, Depends(require_role("admin"))]
# One per action without an owner (core/permissions.py's table): the routes that do it say so by name.
Submitter = Annotated[Principal, Depends(require_action("job.submit"))]
SweepStarter = Annotated[Principal, Depends(require_action("sweep.create"))]
Uploader = Annotated[Principal, Depends(require_action("code.upload"))]
UserAdmin = Annotated[Principal, Depends(require_action("user.add"))]
UserChanger = Annotated[Principal, Depends(require_action("user.change"))]
HostOperator = Annotated[Principal, Depends(require_action("host.drain"))]
WorkerManager = Annotated[Principal, Depends(require_action("worker.manage"))]
Shipper = Annotated[Principal, Depends(require_action("artifact.ship"))]
WebhookAdder = Annotated[Principal, Depends(require_action("webhook.add"))]

# Ids are positive 32-bit integers: anything else is a 422 before the database sees it.
MAX_ID = 2**31 - 1
JobId = Annotated[int, Path(ge=1, le=MAX_ID, description="Job id.")]
CheckpointId = Annotated[int, Path(ge=1, le=MAX_ID, description="Checkpoint id.")]


def get_session(settings: SettingsDep) -> Iterator[Session]:
    with Session(get_engine(settings.resolved_database_url)) as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session)]


def job_or_404(session: Session, job_id: int) -> Job:
    job = session.get(Job, job_id)
    if job is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {job_id}: list jobs with GET /api/jobs")
    return job
