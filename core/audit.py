"""The audit log (issue 23): who did what, when. One row per state-changing request, added in the
same transaction as the change it records, so the log never names a change that rolled back.

Actions: job.submit, job.cancel, job.priority, job.archive, job.unarchive, job.delete, job.edit (tags,
note), user.add, user.role, user.quota, token.add, token.revoke, host.drain, host.undrain, sweep.create,
sweep.cancel, sweep.pause, sweep.resume, sweep.extend, worker.add, worker.revoke, code.upload (a new
bundle), code.left_out (issue 37). A job a sweep
creates is a job.submit by the sweep's owner whose detail names the sweep ("trial 3 of sweep 2: …"),
whichever process made it (the scheduler's sweep driver included: `record_for`)."""

from __future__ import annotations

from sqlmodel import Session, col, select

from core.tables import AuditEvent, User
from core.users import Principal

MAX_DETAIL_CHARS = 2000
MAX_PAGE = 500


def record(session: Session, who: Principal, action: str, target: str, detail: str | None = None) -> None:
    """Add the event to `session` (the caller commits it with the change)."""
    if detail is not None and len(detail) > MAX_DETAIL_CHARS:
        detail = detail[: MAX_DETAIL_CHARS - 1] + "…"
    session.add(AuditEvent(actor_id=who.user_id, actor=who.name, action=action, target=target[:200], detail=detail))


def record_for(session: Session, user_id: int | None, action: str, target: str, detail: str | None = None) -> None:
    """`record` for a change made on a user's behalf by the service itself (a sweep's trials): the actor is
    that user (or "system" when the row has no owner)."""
    user = session.get(User, user_id) if user_id is not None else None
    name = user.name if user is not None else "system"
    if detail is not None and len(detail) > MAX_DETAIL_CHARS:
        detail = detail[: MAX_DETAIL_CHARS - 1] + "…"
    session.add(
        AuditEvent(actor_id=user_id if user else None, actor=name, action=action, target=target[:200], detail=detail)
    )


def events(
    session: Session,
    *,
    limit: int = 100,
    before_id: int | None = None,
    action: str | None = None,
    actor: str | None = None,
) -> list[AuditEvent]:
    """Newest first; `before_id` pages back (keyset: linear in the page, whatever the log's length)."""
    query = select(AuditEvent)
    if before_id is not None:
        query = query.where(col(AuditEvent.id) < before_id)
    if action:
        query = query.where(AuditEvent.action == action)
    if actor:
        query = query.where(AuditEvent.actor == actor)
    return list(session.exec(query.order_by(col(AuditEvent.id).desc()).limit(min(limit, MAX_PAGE))).all())
