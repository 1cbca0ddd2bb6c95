"""Worker hosts' credentials (issue 34 part 4): one per host, made by an admin, scoped to what a worker does
(core/permissions.py WORKER_ACTIONS: ship and fetch a job's files, fetch code bundles), revocable per host.

A worker credential is never an admin's: a compromised host can ship files for jobs and read bundles, but
lists no users or jobs, submits nothing and reads no audit log (api/auth.py refuses it every other route).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, status

from api.auth import forget_tokens
from api.deps import Admin, CurrentUser, SessionDep, WorkerManager
from api.models_team import WorkerCreate, WorkerCreated, WorkerMe, WorkerPublic
from core import audit, users

router = APIRouter(tags=["workers"])
HostName = Annotated[str, Path(pattern=users.HOST_PATTERN, description="The host's name (RANKZERO_HOST_NAME).")]


@router.get("/workers", response_model=list[WorkerPublic])
def list_workers(session: SessionDep, _who: Admin) -> list[WorkerPublic]:
    """Every worker host given a credential, with its newest token's use and revocation (admin)."""
    return [WorkerPublic.from_rows(user, token) for user, token in users.workers(session)]


@router.post("/workers", status_code=status.HTTP_201_CREATED, response_model=WorkerCreated)
def add_worker(body: WorkerCreate, session: SessionDep, who: WorkerManager) -> WorkerCreated:
    """A new credential for the host (shown once; its earlier ones are revoked): set it there as
    RANKZERO_WORKER_TOKEN."""
    try:
        user, row, plaintext = users.add_worker(session, body.host)
    except users.UserError as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    audit.record(session, who, "worker.add", f"host {body.host}", f"token {row.id}")
    session.commit()
    forget_tokens()  # the host's earlier token is refused at once, pre-checks included
    session.refresh(row)
    return WorkerCreated(**WorkerPublic.from_rows(user, row).model_dump(), token=plaintext)


@router.post("/workers/{host}/revoke", response_model=WorkerPublic)
def revoke_worker(host: HostName, session: SessionDep, who: WorkerManager) -> WorkerPublic:
    """Revoke the host's credential: its requests are refused from now on (404 when it never had one)."""
    revoked = users.revoke_worker(session, host)
    found = [(u, t) for u, t in users.workers(session) if u.name == users.WORKER_PREFIX + host]
    if not found:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no worker credential for host {host!r}: GET /api/workers")
    audit.record(session, who, "worker.revoke", f"host {host}", f"{revoked} token(s)")
    session.commit()
    forget_tokens()
    user, token = found[0]
    if token is not None:
        session.refresh(token)
    return WorkerPublic.from_rows(user, token)


@router.get("/workers/me", response_model=WorkerMe)
def whoami(who: CurrentUser) -> WorkerMe:
    """Which host a worker credential is (a worker checks its RANKZERO_WORKER_TOKEN with it)."""
    if who.role != users.WORKER_ROLE:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"{who.name} is a user, not a worker host: GET /api/me")
    return WorkerMe(host=who.name.removeprefix(users.WORKER_PREFIX))
