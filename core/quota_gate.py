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

The server's own limit (RANKZERO_MAX_ACTIVE_JOBS: jobs queued or running, everyone's) is a count then an
insert too. Taking a server-wide lock on every submit would serialize a burst for nothing, so the count is
taken without one first, and only near the limit (within NEAR_LIMIT jobs) again under a server-wide lock
(PostgreSQL: a transaction-level advisory lock; SQLite: the IMMEDIATE transaction already is one), always
after the user's lock, so two submits never wait on each other in opposite orders.

The running quotas (GPUs, CPU slots) are decided by the one active scheduler in a pass that counts what
each owner holds as it places (core/placement.py), so they need no lock of their own. The pure decisions
are core/quotas.py's.
"""

from __future__ import annotations

from sqlalchemy import func, text
from sqlmodel import Session, col, select

from core import quotas, team_pass
from core.settings import Settings
from core.tables import TERMINAL_STATUSES, Job, JobStatus, User

NEAR_LIMIT = 64  # jobs below RANKZERO_MAX_ACTIVE_JOBS from which a submit recounts under the server's lock
SERVER_LOCK_KEY = 0x72616E6B  # pg_advisory_xact_lock's key for "the server's active jobs" ("rank")


class OverQuota(Exception):
    """The user has her quota of queued jobs, or the server its limit of active jobs; the message says which."""


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
    if user_id is not None:
        lock_user(session, user_id)
        user = session.get(User, user_id)
        quota = team_pass.quota_of(user, settings) if user is not None else None
        if quota is not None and quota.max_queued < quotas.UNLIMITED:
            over = quotas.over_queued(queued_of(session, user_id), quota)
            if over is not None:
                session.rollback()  # the lock goes with it
                raise OverQuota(over)
    _admit_server(session, settings)


def active_jobs(session: Session) -> int:
    query = select(func.count()).select_from(Job).where(col(Job.status).not_in(list(TERMINAL_STATUSES)))
    return int(session.exec(query).one())


def _admit_server(session: Session, settings: Settings) -> None:
    limit = settings.max_active_jobs
    if active_jobs(session) < limit - NEAR_LIMIT:
        return
    bind = session.connection()
    if bind.dialect.name == "postgresql":
        bind.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": SERVER_LOCK_KEY})
    elif not getattr(bind.connection.dbapi_connection, "in_transaction", True):
        bind.exec_driver_sql("BEGIN IMMEDIATE")  # no user lock taken (an ownerless job): the database's lock
    active = active_jobs(session)
    if active >= limit:
        session.rollback()
        raise OverQuota(
            f"{active:,} jobs are queued or running, this server's limit is {limit:,} (RANKZERO_MAX_ACTIVE_JOBS): "
            "submit again when some have finished, or cancel some"
        )
