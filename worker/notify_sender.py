"""Delivering notifications (the outbox of core/notify.py: jobs' transitions, sweeps' ends) to the server's
webhooks and to the owner's own (core/webhooks.py), from every worker.

Each pass: turn new outbox events into one delivery per configured URL and per webhook of the event's owner
(one worker wins each event:
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

from core import kombu_compat, notify, wake, webhooks
from core.db import db_now, get_engine
from core.settings import Settings
from core.tables import Job, NotificationDelivery, NotificationEvent, Sweep, Webhook

log = logging.getLogger("rankzero.worker")
BATCH = 50
POLL_S = 1.0
# A pass that found nothing to do makes the next one wait longer, up to IDLE_S (issue 29: three queries a
# second were a third of an idle worker's CPU). A commit on a SQLite database (core/wake.py's touch: a job's
# end, a submit, a cancel) wakes the sender at once; on PostgreSQL a notification waits at most IDLE_S.
IDLE_S = 5.0


@dataclass(frozen=True)
class Due:
    delivery_id: int
    url: str
    attempts: int
    body: bytes
    event: str  # job.<kind> or sweep.<kind>
    secret: str | None  # a user's own webhook's; None: the server's (RANKZERO_WEBHOOK_SECRET)


def _owner_hooks(s: Session, job_id: int | None, sweep_id: int | None) -> list[Webhook]:
    """The webhooks of the event's owner: the job's owner (a sweep's trial is its owner's job), or the sweep's."""
    table = Job if job_id is not None else Sweep
    owner = s.execute(select(col(table.owner_id)).where(col(table.id) == (job_id or sweep_id))).scalar_one_or_none()
    if owner is None:
        return []
    return list(s.execute(select(Webhook).where(col(Webhook.owner_id) == owner).order_by(col(Webhook.id))).scalars())


def fan_out(engine: Engine, urls: list[str]) -> int:
    """New outbox events → one pending delivery per server URL and per webhook of the event's owner (none when
    no webhook is set). Returns events taken."""
    taken = 0
    with Session(engine) as s:
        ids = s.execute(
            select(col(NotificationEvent.id), col(NotificationEvent.job_id), col(NotificationEvent.sweep_id))
            .where(col(NotificationEvent.fanned_out).is_(False))
            .order_by(col(NotificationEvent.id))
            .limit(BATCH)
        ).all()
    for event_id, job_id, sweep_id in ids:
        with Session(engine) as s:
            won = s.execute(
                update(NotificationEvent)
                .where(col(NotificationEvent.id) == event_id, col(NotificationEvent.fanned_out).is_(False))
                .values(fanned_out=True)
            ).rowcount  # pyright: ignore[reportAttributeAccessIssue]  (an UPDATE: a CursorResult)
            if won != 1:
                continue  # another worker took it
            now = db_now(engine)
            targets = [(url, None) for url in urls] + [(h.url, h.id) for h in _owner_hooks(s, job_id, sweep_id)]
            for url, hook_id in targets:
                s.add(
                    NotificationDelivery(
                        event_id=event_id, job_id=job_id, webhook_id=hook_id, url=url, next_at=now, created_at=now
                    )
                )
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
            select(NotificationDelivery, NotificationEvent, col(Job.name), col(Job.queue), col(Sweep.name), Webhook)
            .join(NotificationEvent, col(NotificationEvent.id) == col(NotificationDelivery.event_id))
            .outerjoin(Job, col(Job.id) == col(NotificationEvent.job_id))
            .outerjoin(Sweep, col(Sweep.id) == col(NotificationEvent.sweep_id))
            .outerjoin(Webhook, col(Webhook.id) == col(NotificationDelivery.webhook_id))
            .where(col(NotificationDelivery.state) == "pending", col(NotificationDelivery.next_at) <= now)
            .order_by(col(NotificationDelivery.next_at))
            .limit(BATCH)
        ).all()
        s.expunge_all()  # read after the session closes (one webhook or event may be in several rows)
    due = []
    for d, event, job_name, pool, sweep_name, hook in rows:
        if d.id is None or not _claim(engine, d.id, d.next_at, hold_s):
            continue
        if event.job_id is not None:
            raw = notify.body(event, job_name or "", pool, event.at)
        else:
            raw = notify.sweep_body(event, sweep_name or "", event.at)
        secret = hook.secret if hook is not None else None
        due.append(Due(d.id, d.url, d.attempts, raw, notify.event_name(event), secret))
    return due


def post(client: httpx.Client, due: Due, secret: str, allow_private: bool) -> tuple[int | None, str | None]:
    """POST one delivery: (the receiver's status, or None and why there was no answer). A user's own webhook is
    signed with its secret and reaches public addresses only, checked again now (core/webhooks.py)."""
    if due.secret is not None and (why := webhooks.refusal(due.url, allow_private)) is not None:
        return None, why
    signing = due.secret if due.secret is not None else secret
    return webhooks.send(client, due.url, due.body, signing, due.event, str(due.delivery_id))


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
        status, error = post(client, d, secret, settings.webhook_allow_private)
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
