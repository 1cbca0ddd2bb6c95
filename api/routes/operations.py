"""Operating the service: drain and undrain a host (role admin), and a job's
notification delivery log (docs/operations.md)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated
from urllib.parse import urlsplit

from fastapi import APIRouter, Body, HTTPException, Path, status
from pydantic import BaseModel, Field
from sqlalchemy import ColumnElement, select
from sqlmodel import Session, col

from api.deps import CurrentUser, HostOperator, JobId, SessionDep, SettingsDep, job_or_404
from api.models import ErrorDetail, HostPublic
from api.routes.hosts import list_hosts
from core import audit, hosts, jobs, notify, permissions
from core.db import get_engine
from core.tables import NotificationDelivery, NotificationEvent, Webhook
from core.users import Principal

router = APIRouter(tags=["operations"])
HostName = Annotated[str, Path(pattern=r"^[A-Za-z0-9._-]{1,100}$", description="The host's name (GET /api/hosts).")]
MAX_NOTE_CHARS = 500
MAX_DELIVERIES = 500  # newest first


class DrainRequest(BaseModel):
    model_config = {"extra": "forbid"}
    note: str | None = Field(None, max_length=MAX_NOTE_CHARS, description="Why (shown on the Hosts page).")


class NotificationPublic(BaseModel):
    id: int
    event: str  # job.succeeded, job.failed, job.cancelled, job.preempted, job.host_lost, job.requeued; sweep.*
    status: str
    at: datetime
    url: str  # scheme and host only: a webhook URL's path often holds its secret (Slack's do)
    webhook_id: int | None = None  # a user's own webhook (GET /api/webhooks); null: one of the server's
    state: str  # pending, delivered, failed (given up)
    attempts: int
    last_status: int | None
    last_error: str | None  # the receiver's answer: shown to admins only (null for others), see below
    next_at: datetime | None  # when it is tried again (pending only)
    delivered_at: datetime | None


def redact(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or '?'}{f':{parts.port}' if parts.port else ''}/…"


def _drain(settings: SettingsDep, name: str, drain: bool, note: str | None) -> HostPublic:
    engine = get_engine(settings.resolved_database_url)
    if not hosts.set_drain(engine, name, drain, note):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no host {name!r}: list hosts with GET /api/hosts")
    host = next(h for h in list_hosts(settings) if h.name == name)
    if drain:  # the timeline says why the jobs there are about to step back (their requeue reads like a deploy's)
        why = f" ({note})" if note else ""
        for job in host.jobs:
            jobs.note(engine, job.id, f"host {name} drained by an operator{why}: checkpointing to resume elsewhere")
    return host


@router.post("/hosts/{name}/drain", response_model=HostPublic, responses={404: {"model": ErrorDetail}})
def drain_host(
    settings: SettingsDep,
    session: SessionDep,
    name: HostName,
    who: HostOperator,
    body: Annotated[DrainRequest | None, Body()] = None,
) -> HostPublic:
    """Drain a host (admin): nothing new is placed there, and its running jobs checkpoint and resume elsewhere
    (within a few heartbeats). It stays drained, across worker restarts, until undrained."""
    note = (body.note or "").strip() or None if body else None
    host = _drain(settings, name, True, note)
    audit.record(session, who, "host.drain", f"host {name}", note)
    session.commit()
    return host


@router.post("/hosts/{name}/undrain", response_model=HostPublic, responses={404: {"model": ErrorDetail}})
def undrain_host(settings: SettingsDep, session: SessionDep, name: HostName, who: HostOperator) -> HostPublic:
    """Give a drained host back to the scheduler (admin)."""
    host = _drain(settings, name, False, None)
    audit.record(session, who, "host.undrain", f"host {name}")
    session.commit()
    return host


@router.get(
    "/jobs/{job_id}/notifications",
    response_model=list[NotificationPublic],
    responses={404: {"model": ErrorDetail}},
)
def job_notifications(job_id: JobId, session: SessionDep, who: CurrentUser) -> list[NotificationPublic]:
    """The job's webhook deliveries, newest first: one per notification and webhook (the server's and its
    owner's own), with its attempts. The status codes are everyone's; the receiver's error text only the
    hook's owner's and the admins' (core/permissions.py `webhook.errors`; issue 37: a receiver's error body,
    which may quote its own secrets, reached every viewer)."""
    job_or_404(session, job_id)
    return deliveries(session, who, col(NotificationDelivery.job_id) == job_id)


def deliveries(session: Session, who: Principal, where: ColumnElement[bool]) -> list[NotificationPublic]:
    """The deliveries `where` picks, newest first, as `who` may see them."""
    rows = session.execute(
        select(NotificationDelivery, NotificationEvent, col(Webhook.owner_id))
        .join(NotificationEvent, col(NotificationEvent.id) == col(NotificationDelivery.event_id))
        .outerjoin(Webhook, col(Webhook.id) == col(NotificationDelivery.webhook_id))
        .where(where)
        .order_by(col(NotificationDelivery.id).desc())
        .limit(MAX_DELIVERIES)
    ).all()
    return [
        NotificationPublic(
            id=d.id or 0,
            event=notify.event_name(e),
            status=e.status,
            at=e.at,
            url=redact(d.url),
            webhook_id=d.webhook_id,
            state=d.state,
            attempts=d.attempts,
            last_status=d.last_status,
            last_error=d.last_error if sees_errors(who, owner_id) else None,
            next_at=d.next_at if d.state == "pending" else None,
            delivered_at=d.delivered_at,
        )
        for d, e, owner_id in rows
    ]


def sees_errors(who: Principal, hook_owner_id: int | None) -> bool:
    """Whether `who` reads the error text of a delivery to a hook owned by `hook_owner_id` (None: the server's)."""
    own = hook_owner_id is not None and hook_owner_id == who.user_id
    return permissions.allowed(who.role, "webhook.errors", own)
