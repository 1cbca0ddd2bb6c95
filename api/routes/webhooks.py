"""A user's own webhooks (issue 37 part 5; core/webhooks.py): add, list, remove, test, and a hook's delivery log.

Her jobs' and sweeps' events (a sweep's end included) are POSTed to each of her hooks, signed with the
hook's own secret, which is shown once, in the answer that adds it. Who may do what is core/permissions.py's
(`webhook.*`): a member adds hers and removes or tests hers, an admin anyone's; a hook's delivery errors are
its owner's and the admins' to read, the status codes everyone's.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import httpx
from fastapi import APIRouter, HTTPException, Path, status
from pydantic import BaseModel, Field
from sqlalchemy import func
from sqlmodel import Session, col, select

from api.auth import permit
from api.deps import MAX_ID, CurrentUser, SessionDep, SettingsDep, WebhookAdder
from api.models import ErrorDetail
from api.routes.operations import NotificationPublic, deliveries, redact  # redact: a URL's path may hold a secret
from core import audit, notify, permissions, webhooks
from core.tables import NotificationDelivery, User, Webhook, utcnow

router = APIRouter(tags=["webhooks"])
WebhookId = Annotated[int, Path(ge=1, le=MAX_ID, description="Webhook id (GET /api/webhooks).")]


class WebhookRequest(BaseModel):
    model_config = {"extra": "forbid"}
    url: str = Field(
        max_length=webhooks.MAX_URL_CHARS,
        description="http(s) URL her events are POSTed to; a public address (RANKZERO_WEBHOOK_ALLOW_PRIVATE).",
    )


class WebhookPublic(BaseModel):
    id: int
    owner: str
    url: str  # in full: only its owner and the admins list it
    created_at: datetime


class WebhookCreated(WebhookPublic):
    secret: str = Field(description="The key of its X-Rankzero-Signature (HMAC-SHA256): shown this once only.")


class WebhookTest(BaseModel):
    status: int | None = Field(description="The receiver's HTTP status; null when it did not answer.")
    error: str | None = Field(description="Why it failed: the receiver's answer or the connection's error.")


def _public(hook: Webhook, owner: str) -> WebhookPublic:
    return WebhookPublic(id=hook.id or 0, owner=owner, url=hook.url, created_at=hook.created_at)


def _hook_or_404(session: Session, webhook_id: int) -> tuple[Webhook, str]:
    query = select(Webhook, col(User.name)).join(User, col(User.id) == col(Webhook.owner_id))
    row = session.exec(query.where(Webhook.id == webhook_id)).first()
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no webhook {webhook_id}: list them with GET /api/webhooks")
    return row[0], row[1]


@router.post(
    "/webhooks",
    status_code=status.HTTP_201_CREATED,
    response_model=WebhookCreated,
    responses={422: {"model": ErrorDetail}},
)
def add_webhook(body: WebhookRequest, session: SessionDep, settings: SettingsDep, who: WebhookAdder) -> WebhookCreated:
    """Add a webhook of the caller's own: her jobs' and sweeps' events go to it, signed with the secret this
    answer carries (shown once). A URL that is not http(s), or whose host is a loopback, link-local, private
    or metadata address, is refused (422) unless the server allows such addresses."""
    url = body.url.strip()
    if (why := webhooks.refusal(url, settings.webhook_allow_private)) is not None:
        raise HTTPException(422, [{"loc": ["body", "url"], "msg": why, "type": "value_error"}])
    assert who.user_id is not None  # a user's credential (require_auth)
    held = session.exec(select(func.count()).select_from(Webhook).where(Webhook.owner_id == who.user_id)).one()
    if held >= webhooks.MAX_PER_USER:
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            f"{who.name} has {held} webhooks, the most one user may have: remove one first (rankzero webhooks rm ID)",
        )
    hook = Webhook(owner_id=who.user_id, url=url, secret=webhooks.new_secret())
    session.add(hook)
    session.flush()
    audit.record(session, who, "webhook.add", f"webhook {hook.id}", redact(url))
    session.commit()
    session.refresh(hook)
    return WebhookCreated(**_public(hook, who.name).model_dump(), secret=hook.secret)


@router.get("/webhooks", response_model=list[WebhookPublic])
def list_webhooks(session: SessionDep, who: CurrentUser) -> list[WebhookPublic]:
    """The caller's webhooks (an admin: everyone's), oldest first."""
    query = select(Webhook, col(User.name)).join(User, col(User.id) == col(Webhook.owner_id)).order_by(col(Webhook.id))
    if not permissions.allowed(who.role, "webhook.remove", own=False):  # who may remove anyone's lists them all
        query = query.where(Webhook.owner_id == who.user_id)
    return [_public(hook, owner) for hook, owner in session.execute(query).all()]


@router.delete(
    "/webhooks/{webhook_id}", status_code=status.HTTP_204_NO_CONTENT, responses={404: {"model": ErrorDetail}}
)
def remove_webhook(webhook_id: WebhookId, session: SessionDep, who: CurrentUser) -> None:
    """Remove a webhook (its owner or an admin), and its delivery log with it."""
    hook, _ = _hook_or_404(session, webhook_id)
    permit(who, "webhook.remove", hook.owner_id, f"webhook {webhook_id}")
    session.delete(hook)
    audit.record(session, who, "webhook.remove", f"webhook {webhook_id}", redact(hook.url))
    session.commit()


@router.post("/webhooks/{webhook_id}/test", response_model=WebhookTest, responses={404: {"model": ErrorDetail}})
def test_webhook(webhook_id: WebhookId, session: SessionDep, settings: SettingsDep, who: CurrentUser) -> WebhookTest:
    """Send the webhook a signed `webhook.test` event now (its owner or an admin) and say what the receiver
    answered."""
    hook, owner = _hook_or_404(session, webhook_id)
    permit(who, "webhook.test", hook.owner_id, f"webhook {webhook_id}")
    audit.record(session, who, "webhook.test", f"webhook {webhook_id}", redact(hook.url))
    session.commit()
    if (why := webhooks.refusal(hook.url, settings.webhook_allow_private)) is not None:
        return WebhookTest(status=None, error=why)
    raw = notify.ping_body(webhook_id, owner, utcnow())
    with httpx.Client(timeout=settings.webhook_timeout_s, follow_redirects=False) as client:
        code, error = webhooks.send(client, hook.url, raw, hook.secret, "webhook.test", f"test-{webhook_id}")
    return WebhookTest(status=code, error=error)


@router.get(
    "/webhooks/{webhook_id}/deliveries",
    response_model=list[NotificationPublic],
    responses={404: {"model": ErrorDetail}},
)
def webhook_deliveries(webhook_id: WebhookId, session: SessionDep, who: CurrentUser) -> list[NotificationPublic]:
    """The webhook's deliveries, newest first (its jobs' and sweeps' events): the status codes for everyone,
    the receiver's error text for its owner and the admins only."""
    _hook_or_404(session, webhook_id)
    return deliveries(session, who, col(NotificationDelivery.webhook_id) == webhook_id)
