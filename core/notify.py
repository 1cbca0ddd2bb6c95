"""Job notifications: which transitions are worth telling, the outbox row written with the transition,
and the webhook's body and signature. Pure but for `record` (one INSERT in the transition's transaction).

A transition never waits on a receiver: `record` only adds a row; worker/notify_sender.py delivers it
later (retries with exponential backoff), so a dead receiver costs the service nothing.

The body is JSON with a Slack-compatible `text`; `X-Rankzero-Signature: sha256=<hex>` is
HMAC-SHA256(RANKZERO_WEBHOOK_SECRET, raw body), or of a user's own webhook (core/webhooks.py) its own
secret. A receiver recomputes it over the bytes it got. A sweep's end is an event too (issue 37).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import datetime
from typing import Any

from sqlmodel import Session

from core.tables import JobStatus, NotificationEvent

S = JobStatus
SIGNATURE_HEADER = "X-Rankzero-Signature"
EVENT_HEADER = "X-Rankzero-Event"
DELIVERY_HEADER = "X-Rankzero-Delivery"
KINDS = ("succeeded", "failed", "cancelled", "preempted", "host_lost", "requeued")
MAX_DETAIL_CHARS = 1000  # of a transition's detail in a body (a failure's error is on the job page)
MAX_BACKOFF_S = 3600.0


def event_kind(to: JobStatus, detail: str | None) -> str | None:
    """What a transition to `to` tells a team (None: nothing worth a message). A move back to the queue is
    a preemption, a lost host, or another hand-back (a restart, a drain); the detail says which."""
    if to in (S.succeeded, S.failed, S.cancelled):
        return to.value
    if to is not S.queued:
        return None
    text = (detail or "").lower()
    if "preempted" in text:
        return "preempted"
    if "host loss" in text or "worker lost" in text or "went silent" in text:
        return "host_lost"
    return "requeued"


def record(session: Session, job_id: int, to: JobStatus, attempt: int, detail: str | None) -> None:
    """Add the outbox row of a transition worth telling, in the caller's transaction (no commit here)."""
    kind = event_kind(to, detail)
    if kind is not None:
        session.add(NotificationEvent(job_id=job_id, kind=kind, status=to.value, attempt=attempt, detail=detail))


SWEEP_KINDS = ("finished", "cancelled")  # a sweep's end (issue 37): its owner's webhooks and the server's hear it


def record_sweep_end(session: Session, sweep_id: int, to: str, note: str | None) -> None:
    """Add the outbox row of a sweep's end (`to`: finished or cancelled), in the caller's transaction."""
    if to in SWEEP_KINDS:
        session.add(NotificationEvent(sweep_id=sweep_id, kind=to, status=to, detail=note))


def event_name(event: NotificationEvent) -> str:
    """The X-Rankzero-Event header and the body's `event`: job.<kind> or sweep.<kind>."""
    return f"{'job' if event.job_id is not None else 'sweep'}.{event.kind}"


def _slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def message_text(job_id: int, name: str, kind: str, detail: str | None) -> str:
    """One line a person reads in a chat channel (Slack's `text`)."""
    words = {"host_lost": "lost its host", "requeued": "went back to the queue", "preempted": "was preempted"}
    line = f"rankzero job {job_id} ({name}) {words.get(kind, kind)}"
    return _slack_escape(f"{line}: {detail[:300]}" if detail else line)


def body(event: NotificationEvent, name: str, pool: str | None, at: datetime) -> bytes:
    """The JSON a webhook receives for `event` of job `name` (sorted keys: the bytes the signature covers)."""
    assert event.job_id is not None  # a job's event (a sweep's: sweep_body)
    detail = (event.detail or "")[:MAX_DETAIL_CHARS] or None
    data: dict[str, Any] = {
        "event": event_name(event),
        "event_id": event.id,
        "job": {"id": event.job_id, "name": name, "pool": pool, "status": event.status, "attempt": event.attempt},
        "detail": detail,
        "at": at.isoformat(),
        "text": message_text(event.job_id, name, event.kind, detail),
    }
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def sweep_body(event: NotificationEvent, name: str, at: datetime) -> bytes:
    """The JSON a webhook receives when sweep `name` ends (sorted keys, as `body`)."""
    detail = (event.detail or "")[:MAX_DETAIL_CHARS] or None
    line = f"rankzero sweep {event.sweep_id} ({name}) {event.kind}"
    data: dict[str, Any] = {
        "event": event_name(event),
        "event_id": event.id,
        "sweep": {"id": event.sweep_id, "name": name, "status": event.status},
        "detail": detail,
        "at": at.isoformat(),
        "text": _slack_escape(f"{line}: {detail[:300]}" if detail else line),
    }
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def ping_body(webhook_id: int, owner: str, at: datetime) -> bytes:
    """What `rankzero webhooks test` sends: signed like every event, so a receiver's check can be tried."""
    data = {
        "event": "webhook.test",
        "webhook": {"id": webhook_id, "owner": owner},
        "at": at.isoformat(),
        "text": f"rankzero: a test of {owner}'s webhook {webhook_id}",
    }
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def sign(secret: str, raw: bytes) -> str:
    """The X-Rankzero-Signature header's value for body `raw`."""
    return "sha256=" + hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()


def signature_ok(secret: str, raw: bytes, header: str) -> bool:
    """What a receiver checks (constant time); here for tests and the docs' example."""
    return hmac.compare_digest(sign(secret, raw), header)


def backoff_s(failures: int, base_s: float) -> float:
    """Wait before the next try after `failures` failed ones: base, 2·base, 4·base, … at most an hour."""
    return min(MAX_BACKOFF_S, base_s * 2 ** max(0, failures - 1))


def after_try(status: int | None, attempts: int, max_attempts: int) -> str:
    """A delivery's state after a try that got `status` (None: no answer): delivered, pending (try again)
    or failed (given up: out of attempts, or 410 Gone, the receiver's way of saying stop)."""
    if status is not None and 200 <= status < 300:
        return "delivered"
    if status == 410 or attempts >= max_attempts:
        return "failed"
    return "pending"
