"""A user's queued quota decided atomically (issue 37): lock her row, count, insert, commit, in one transaction.

A check then an insert in two transactions lets parallel submits all see the same count (12 submits
against a quota of 3 made 10 jobs). Here every path that makes a job for a user (POST /api/jobs,
extend-best, each sweep trial as the driver creates it) first takes a lock only that user's other
new jobs wait on, counts her queued jobs inside the lock and inserts before it is released:

- PostgreSQL: `SELECT … FROM users WHERE id = … FOR UPDATE`, a row lock held until the commit; other
  users' submits never wait on it. Each statement under READ COMMITTED sees what the previous holder
  committed, so the count is current.
- SQLite: `BEGIN IMMEDIATE`, the database's one write lock (SQLite has no row locks; writers are
  serialized anyway), taken before the count so the count and the insert see the same database.

The running quotas (GPUs, CPU slots) are decided by the one active scheduler in a pass that counts what
each owner holds as it places (core/placement.py), so they need no lock of their own. The pure decisions
are core/quotas.py's.
"""

from __future__ import annotations

from sqlalchemy import func, text
from sqlmodel import Session, select

from core import quotas, team_pass
from core.settings import Settings
from core.tables import Job, JobStatus, User


class OverQuota(Exception):
    """The user has her quota of queued jobs; the message names it and what to do."""


def lock_user(session: Session, user_id: int) -> None:
    """Take the per-user lock for the rest of `session`'s transaction (released by its commit or rollback)."""
    bind = session.connection()
    if bind.dialect.name == "postgresql":
        bind.execute(text("SELECT id FROM users WHERE id = :uid FOR UPDATE"), {"uid": user_id})
        return
    raw = bind.connection.dbapi_connection
    if raw is not None and not getattr(raw, "in_transaction", True):
        bind.exec_driver_sql("BEGIN IMMEDIATE")
    else:  # a transaction is open already: a write takes the same lock (busy_timeout waits for it)
        bind.execute(text("UPDATE users SET name = name WHERE id = :uid"), {"uid": user_id})


def queued_of(session: Session, user_id: int) -> int:
    query = select(func.count()).select_from(Job).where(Job.owner_id == user_id, Job.status == JobStatus.queued)
    return int(session.exec(query).one())


def admit(session: Session, settings: Settings, user_id: int | None) -> None:
    """Lock `user_id`'s row and raise OverQuota if one more queued job would pass her quota; on return the
    lock is held: the caller inserts the job in this transaction and commits (or rolls back)."""
    if user_id is None:
        return
    lock_user(session, user_id)
    user = session.get(User, user_id)
    if user is None:
        return
    quota = team_pass.quota_of(user, settings)
    if quota.max_queued >= quotas.UNLIMITED:
        return
    over = quotas.over_queued(queued_of(session, user_id), quota)
    if over is not None:
        session.rollback()  # the lock goes with it
        raise OverQuota(over)
