"""Delivering job notifications (the outbox of core/notify.py) to the server's webhooks, from every worker.

Each pass: turn new outbox events into one delivery per configured URL (one worker wins each event:
a conditional UPDATE), then try the deliveries that are due. A try is claimed first by pushing its
`next_at` past the request's timeout (a conditional UPDATE: one worker per try, and a worker that dies
mid-try leaves it to be tried again), then POSTed, then written back: delivered, pending with an
exponential backoff, or failed (given up). At-least-once: a receiver may see a delivery id twice.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

import httpx
from sqlalchemy import select, update
from sqlalchemy.engine import Engine
from sqlmodel import Session, col

from core import kombu_compat, notify, wake
from core.db import db_now, get_engine
from core.settings import Settings
from core.tables import Job, NotificationDelivery, NotificationEvent

log = logging.getLogger("rankzero.worker")
BATCH = 50
POLL_S = 1.0
# A pass that found nothing to do makes the next one wait longer, up to IDLE_S (issue 29: three queries a
# second were a third of an idle worker's CPU). A commit on a SQLite database (core/wake.py's touch: a job's
# end, a submit, a cancel) wakes the sender at once; on PostgreSQL a notification waits at most IDLE_S.
IDLE_S = 5.0
MAX_ERROR_CHARS = 500


@dataclass(frozen=True)
class Due:
    delivery_id: int
    url: str
    attempts: int
    body: bytes
    kind: str


def fan_out(engine: Engine, urls: list[str]) -> int:
    """New outbox events → one pending delivery per URL (none when no webhook is set). Returns events taken."""
    taken = 0
    with Session(engine) as s:
        ids = s.execute(
            select(col(NotificationEvent.id), col(NotificationEvent.job_id))
            .where(col(NotificationEvent.fanned_out).is_(False))
            .order_by(col(NotificationEvent.id))
            .limit(BATCH)
        ).all()
    for event_id, job_id in ids:
        with Session(engine) as s:
            won = s.execute(
                update(NotificationEvent)
                .where(col(NotificationEvent.id) == event_id, col(NotificationEvent.fanned_out).is_(False))
                .values(fanned_out=True)
            ).rowcount  # pyright: ignore[reportAttributeAccessIssue]  (an UPDATE: a CursorResult)
            if won != 1:
                continue  # another worker took it
            now = db_now(engine)
            for url in urls:
                s.add(NotificationDelivery(event_id=event_id, job_id=job_id, url=url, next_at=now, created_at=now))
            s.commit()
            taken += 1
    return taken


def _claim(engine: Engine, delivery_id: int, seen_next: datetime, hold_s: float) -> bool:
    with Session(engine) as s:
        won = s.execute(
            update(NotificationDelivery)
            .where(
                col(NotificationDelivery.id) == delivery_id,
                col(NotificationDelivery.state) == "pending",
                col(NotificationDelivery.next_at) == seen_next,
            )
            .values(next_at=db_now(engine) + timedelta(seconds=hold_s))
        ).rowcount  # pyright: ignore[reportAttributeAccessIssue]
        s.commit()
        return won == 1


def take_due(engine: Engine, hold_s: float) -> list[Due]:
    """The deliveries due now, each claimed by this worker, with the body to send."""
    now = db_now(engine)
    with Session(engine) as s:
        rows = s.execute(
            select(NotificationDelivery, NotificationEvent, col(Job.name), col(Job.queue))
            .join(NotificationEvent, col(NotificationEvent.id) == col(NotificationDelivery.event_id))
            .join(Job, col(Job.id) == col(NotificationDelivery.job_id))
            .where(col(NotificationDelivery.state) == "pending", col(NotificationDelivery.next_at) <= now)
            .order_by(col(NotificationDelivery.next_at))
            .limit(BATCH)
        ).all()
        for d, _, _, _ in rows:
            s.expunge(d)
    due = []
    for d, event, name, pool in rows:
        if d.id is not None and _claim(engine, d.id, d.next_at, hold_s):
            due.append(Due(d.id, d.url, d.attempts, notify.body(event, name, pool, event.at), event.kind))
    return due


def post(client: httpx.Client, due: Due, secret: str) -> tuple[int | None, str | None]:
    """POST one delivery: (the receiver's status, or None and why there was no answer)."""
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "rankzero-webhook",
        notify.SIGNATURE_HEADER: notify.sign(secret, due.body),
        notify.EVENT_HEADER: f"job.{due.kind}",
        notify.DELIVERY_HEADER: str(due.delivery_id),
    }
    try:
        r = client.post(due.url, content=due.body, headers=headers)
    except httpx.HTTPError as exc:
        return None, f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]
    return r.status_code, None if r.is_success else f"HTTP {r.status_code}: {r.text[:200]}"


def write_back(engine: Engine, due: Due, status: int | None, error: str | None, settings: Settings) -> str:
    attempts = due.attempts + 1
    state = notify.after_try(status, attempts, settings.webhook_max_attempts)
    now = db_now(engine)
    values: dict[str, object] = {"state": state, "attempts": attempts, "last_status": status, "last_error": error}
    if state == "delivered":
        values["delivered_at"] = now
    elif state == "pending":
        values["next_at"] = now + timedelta(seconds=notify.backoff_s(attempts, settings.webhook_backoff_s))
    with Session(engine) as s:
        s.execute(update(NotificationDelivery).where(col(NotificationDelivery.id) == due.delivery_id).values(**values))
        s.commit()
    return state


def next_wait_s(waited_s: float, worked: bool) -> float:
    """Seconds to the next pass: POLL_S after one that did something, else twice the last wait, up to IDLE_S."""
    return POLL_S if worked else min(IDLE_S, max(POLL_S, 2 * waited_s))


def run_pass(engine: Engine, settings: Settings, client: httpx.Client) -> int:
    """One pass: fan out, then try what is due. Returns the events taken plus the tries made."""
    taken = fan_out(engine, settings.webhook_url_list)
    secret = settings.webhook_secret.get_secret_value() if settings.webhook_secret else ""
    due = take_due(engine, hold_s=settings.webhook_timeout_s + 30)
    for d in due:
        status, error = post(client, d, secret)
        state = write_back(engine, d, status, error, settings)
        if state != "delivered":
            log.warning("webhook delivery %s to %s: %s (%s)", d.delivery_id, d.url.split("?")[0][:80], state, error)
    return taken + len(due)


def start_sender_thread(settings: Settings, stop: threading.Event) -> threading.Thread:
    """The worker's notification sender: a pass every second while there is work, less often while there is
    none (`next_wait_s`), at once after a commit on SQLite (nothing to do without webhooks but marking the
    outbox read)."""
    engine = get_engine(settings.resolved_database_url)

    def loop() -> None:
        commits = wake.commit_watch(engine)
        wait_s = POLL_S
        try:
            with httpx.Client(timeout=settings.webhook_timeout_s, follow_redirects=False) as client:
                while not _sleep(stop, commits, wait_s):
                    try:
                        worked = run_pass(engine, settings, client) > 0
                    except Exception:  # the database may be restarting; the next pass tries again
                        log.warning("notification pass failed", exc_info=True)
                        worked = False
                    wait_s = next_wait_s(wait_s, worked)
        finally:
            if commits is not None:
                commits.close()

    thread = threading.Thread(target=loop, name="rankzero-notify", daemon=True)
    thread.start()
    return thread


def _sleep(stop: threading.Event, commits: kombu_compat.BrokerWatch | None, seconds: float) -> bool:
    """Wait `seconds`, or less when a commit touches the wake-up file (checked every POLL_S: the stop event
    is still seen within a second); True when the worker is stopping."""
    if commits is None:
        return stop.wait(seconds)
    until = time.monotonic() + seconds
    while (left := until - time.monotonic()) > 0:
        if stop.is_set():
            return True
        if commits.wait(min(left, POLL_S), POLL_S):
            break
    return stop.is_set()
