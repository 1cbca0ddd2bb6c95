"""The only writer of job rows: every way a job is created, moves between states or records progress.

Each state change is a conditional UPDATE through `transition` (two actors cannot both win) plus a
timeline row; the legal moves are `core.job_state.ALLOWED`. Progress columns (heartbeat, ingested
events) are written here too, so a reader finds every UPDATE of `jobs` in this file. A change the
scheduler acts on (a submit, a requeue, a job's end) wakes it once committed (core/wake.py).
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, TypedDict, cast

from sqlalchemy import update
from sqlalchemy.engine import Connection, CursorResult, Engine
from sqlmodel import Session, col, select

from core import host_health, notify, time_breakdown, wake
from core.db import now_sql
from core.job_state import ALLOWED, LIVE, IllegalTransition
from core.placement_record import BadPlacement, read_placement
from core.tables import Job, JobStatus, JobTransition
from trainer.run_dir import job_run_dir

S = JobStatus


class Unplaced(TypedDict):
    """The columns `UNPLACED` clears: typed key by key, so `**UNPLACED` is checked against the keywords it meets."""

    placement: None
    placement_id: None
    rendezvous: None
    preempt_for: None
    vouched_at: None


# What a job that goes back to the queue forgets: where it ran. The scheduler places it afresh.
UNPLACED: Unplaced = {
    "placement": None, "placement_id": None, "rendezvous": None, "preempt_for": None, "vouched_at": None,
}  # fmt: skip


class FencedOut(Exception):
    """A supervisor's write was refused: the row is now another attempt's (this one was replaced)."""

    def __init__(self, job_id: int, attempt: int) -> None:
        super().__init__(f"job {job_id}: attempt {attempt} was replaced by a later attempt; it writes nothing")
        self.job_id, self.attempt = job_id, attempt


# --- creating and moving ------------------------------------------------------------------------


def create(  # noqa: PLR0913 (the row's fields)
    session: Session,
    name: str,
    spec: dict[str, Any],
    queue: str,
    idempotency_key: str | None = None,
    owner_id: int | None = None,
    before_commit: Callable[[Job], None] | None = None,
) -> Job:
    """Insert a queued job and its first timeline row; committed and refreshed, and the scheduler woken.

    Nothing else is sent anywhere: the scheduler reads the row. Raises IntegrityError when
    `idempotency_key` is taken. `before_commit` adds rows to the same transaction (the audit log's).
    """
    priority = spec.get("priority", 0) if isinstance(spec.get("priority"), int) else 0
    job = Job(
        name=name,
        spec=spec,
        status=S.queued,
        queue=queue,
        idempotency_key=idempotency_key,
        priority=priority,
        owner_id=owner_id,
    )
    session.add(job)
    session.flush()
    if before_commit is not None:
        before_commit(job)
    session.add(JobTransition(job_id=job.id, status=S.queued, at=job.created_at, attempt=0, detail="submitted"))
    session.commit()
    session.refresh(job)
    _wake(session)
    return job


def _wake(session: Session) -> None:
    bind = session.get_bind()
    wake.after_commit(bind if isinstance(bind, Engine) else bind.engine)


def transition(  # noqa: PLR0913 (one keyword per guard of the conditional UPDATE)
    session: Session,
    job_id: int,
    to: JobStatus,
    *,
    expect: JobStatus | set[JobStatus] | frozenset[JobStatus] | None = None,
    detail: str | None = None,
    fence: int | None = None,
    placed_as: str | None = None,
    **fields: object,
) -> bool:
    """Move job `job_id` to `to` if it is in one of `expect` (default: any state allowed to reach `to`).

    Returns False, changing nothing, when the job was not in an expected state (someone else won), or,
    with `fence`, when its `attempt` is no longer `fence` (a supervisor that was replaced), or, with
    `placed_as`, when it no longer holds that placement id (a stale message of the scheduler).
    Extra `fields` are written in the same UPDATE. The caller commits.
    """
    if expect is None:
        sources = {src for src, dsts in ALLOWED.items() if to in dsts}
    else:
        sources = {expect} if isinstance(expect, JobStatus) else set(expect)
        bad = [s for s in sources if to not in ALLOWED[s]]
        if bad:
            raise IllegalTransition(f"{', '.join(s.value for s in bad)} → {to.value} is not a legal job transition")
    now = now_sql(session)
    values: dict[str, object] = {"status": to, **fields}
    if to is S.running and "started_at" not in fields:
        values["started_at"] = now
    if to.is_terminal:
        values["finished_at"] = now
    where = [Job.id == job_id, Job.status.in_(sources)]  # type: ignore[attr-defined]
    if fence is not None:
        where.append(Job.attempt == fence)
    if placed_as is not None:
        where.append(Job.placement_id == placed_as)
    result = cast("CursorResult[Any]", session.execute(update(Job).where(*where).values(**values)))
    if result.rowcount != 1:
        return False
    row = session.get(Job, job_id)
    session.add(JobTransition(job_id=job_id, status=to, at=now, attempt=row.attempt if row else 0, detail=detail))
    if to.is_terminal:  # where its time went, kept for /metrics (core/time_breakdown.py)
        time_breakdown.record(session, job_id)
    if to in (S.failed, S.queued):  # a host that keeps failing jobs leaves placement (core/host_health.py)
        host_health.note(session, job_id, to, detail)
    notify.record(session, job_id, to, row.attempt if row else 0, detail)  # an outbox row, same transaction
    return True


def claim(
    engine: Engine,
    job_id: int,
    runs_dir: Path,
    *,
    host: str | None = None,
    placement_id: str | None = None,
    rendezvous: str | None = None,
) -> Job | None:
    """Move the job queued → starting (attempt + 1) for this host; None when another delivery won.

    With `placement_id`, only while the row still holds that placement (the scheduler's message is
    not stale); `rendezvous` is node 0's c10d endpoint, which the other nodes wait for."""
    host = host or socket.gethostname()
    hosts = _placement_hosts(engine, job_id) if placement_id else host
    with Session(engine) as s:
        won = transition(
            s,
            job_id,
            S.starting,
            expect=S.queued,
            detail=f"claimed by {hosts}",
            placed_as=placement_id,
            attempt=Job.attempt + 1,
            worker_host=host,
            heartbeat_at=now_sql(s),
            run_dir=str(job_run_dir(runs_dir, job_id)),
            pid=None,
            exit_code=None,
            failed_rank=None,
            rendezvous=rendezvous,
            pending_reason=None,
        )
        s.commit()
        if not won:
            return None
        job = s.get(Job, job_id)
        s.refresh(job)
        s.expunge(job)
        return job


def mark_running(engine: Engine, job_id: int, pid: int, detail: str, attempt: int | None = None) -> bool:
    """starting → running for attempt `attempt` (when given: False if the row is another attempt's)."""
    with Session(engine) as s:
        won = transition(
            s, job_id, S.running, expect=S.starting, detail=detail, fence=attempt, pid=pid, heartbeat_at=now_sql(s)
        )
        s.commit()
        return won


def refuse(engine: Engine, job_id: int, message: str) -> bool:
    """A queued job this worker can never run: failed, with `message` as its error."""
    with Session(engine) as s:
        won = transition(s, job_id, S.failed, expect=S.queued, detail=message, error=message)
        s.commit()
        return won


def finish(
    engine: Engine, job_id: int, to: JobStatus, detail: str | None = None, attempt: int | None = None, **fields: Any
) -> bool:
    """A live job's attempt ended: succeeded, failed or cancelled (`attempt`: only if the row is still its).
    Its place is free: the scheduler is woken."""
    with Session(engine) as s:
        sources = {src for src in LIVE if to in ALLOWED[src]}
        won = transition(s, job_id, to, expect=sources, detail=detail, fence=attempt, pid=None, **fields)
        s.commit()
    if won:
        wake.after_commit(engine)
    return won


def requeue(engine: Engine, job_id: int, detail: str, attempt: int | None = None, **fields: Any) -> bool:
    """running/starting → queued (heartbeat and placement cleared; `attempt`: fenced); the scheduler is woken
    to place it again."""
    with Session(engine) as s:
        won = transition(
            s,
            job_id,
            S.queued,
            expect={S.starting, S.running},
            detail=detail,
            fence=attempt,
            pid=None,
            heartbeat_at=None,
            **UNPLACED,
            **fields,
        )
        s.commit()
    if won:
        wake.after_commit(engine)
    return won


# --- heartbeats and progress --------------------------------------------------------------------


def touch_queued(engine: Engine, job_id: int) -> bool:
    """Vouch for a placed queued job held by a worker waiting for its GPUs (recovery places it again if that
    worker dies: worker/recover.py). False: no longer queued."""
    with engine.begin() as conn:
        result = conn.execute(
            update(Job).where(col(Job.id) == job_id, col(Job.status) == S.queued).values(vouched_at=now_sql(conn))
        )  # type: ignore[arg-type]
        return result.rowcount == 1


def touch_live(engine: Engine, job_id: int, attempt: int | None = None) -> bool:
    """The heartbeat of a running job: proof for recovery that its worker is alive. False: the row is not
    live (or, with `attempt`, is another attempt's), and nothing was written."""
    where = [Job.id == job_id, Job.status.in_(LIVE)]  # type: ignore[attr-defined]
    if attempt is not None:
        where.append(Job.attempt == attempt)
    with engine.begin() as conn:
        return conn.execute(update(Job).where(*where).values(heartbeat_at=now_sql(conn))).rowcount == 1  # type: ignore[arg-type]


def record_ingested(
    conn: Connection, job_id: int, seq: int, progress: dict[str, Any], attempt: int | None = None
) -> None:
    """Events up to `seq` are in the database (same transaction as their points): note it, with progress.

    With `attempt`, raises FencedOut when the row is another attempt's: the caller's transaction (its
    points too) rolls back, and the newer attempt's supervisor ingests the same file itself."""
    where = [Job.id == job_id]
    if attempt is not None:
        where.append(Job.attempt == attempt)
    values = {"ingested_seq": seq, "heartbeat_at": now_sql(conn), **progress}
    if conn.execute(update(Job).where(*where).values(**values)).rowcount != 1 and attempt is not None:  # type: ignore[arg-type]
        raise FencedOut(job_id, attempt)


def by_idempotency_key(session: Session, key: str) -> Job | None:
    return session.exec(select(Job).where(Job.idempotency_key == key)).first()


def take_stale_queued(session: Session, job_id: int, seen_vouched: datetime | None) -> bool:
    """Take a placed queued job nobody vouched for lately, to place it again: True for exactly one sweeper
    (`vouched_at` still `seen_vouched`). Vouched for again now, so a sweep that loses the race to place it
    again finds it fresh."""
    result = cast(
        "CursorResult[Any]",
        session.execute(
            update(Job)
            .where(col(Job.id) == job_id, col(Job.status) == S.queued, col(Job.vouched_at) == seen_vouched)
            .values(vouched_at=now_sql(session)),  # type: ignore[arg-type]
        ),
    )
    return result.rowcount == 1


# --- scheduling ---------------------------------------------------------------------------------


def place(conn: Connection, job_id: int, placement: dict[str, Any], placement_id: str) -> bool:
    """The scheduler put queued job `job_id` on hosts: True when it was still queued and unplaced."""
    result = conn.execute(
        update(Job)
        .where(Job.id == job_id, Job.status == S.queued, Job.placement_id.is_(None))  # type: ignore[union-attr]
        .values(placement=placement, placement_id=placement_id, pending_reason=None, vouched_at=now_sql(conn))
    )
    return result.rowcount == 1


def unplace(engine: Engine, job_id: int, placement_id: str | None = None, reason: str | None = None) -> bool:
    """Take back the placement of a queued job (its message could not be sent, or its host died before
    starting it): the scheduler places it again. With `placement_id`, only that placement."""
    where = [Job.id == job_id, Job.status == S.queued, Job.placement_id.isnot(None)]  # type: ignore[union-attr]
    if placement_id is not None:
        where.append(Job.placement_id == placement_id)
    with engine.begin() as conn:
        values = {**UNPLACED, "pending_reason": reason}
        return conn.execute(update(Job).where(*where).values(**values)).rowcount == 1  # type: ignore[arg-type]


def set_pending_reason(conn: Connection, job_id: int, reason: str) -> None:
    unplaced = Job.placement_id.is_(None)  # type: ignore[union-attr]
    where = (col(Job.id) == job_id, col(Job.status) == S.queued, unplaced)
    conn.execute(update(Job).where(*where).values(pending_reason=reason))


def request_preemption(conn: Connection, victim_id: int, for_job: int) -> bool:
    """Ask a running preemptible job to checkpoint and step back for `for_job` (its supervisor acts on it)."""
    result = conn.execute(
        update(Job)
        .where(Job.id == victim_id, Job.status.in_([S.starting, S.running]), Job.preempt_for.is_(None))  # type: ignore[attr-defined,union-attr]
        .values(preempt_for=for_job)
    )
    return result.rowcount == 1


def set_priority(session: Session, job_id: int, priority: int) -> bool:
    """Change a queued job's priority (a live job keeps the one it was placed with). False: not queued."""
    queued = update(Job).where(col(Job.id) == job_id, col(Job.status) == S.queued)
    result = cast("CursorResult[Any]", session.execute(queued.values(priority=priority)))  # type: ignore[arg-type]
    if result.rowcount != 1:
        return False
    detail = f"priority set to {priority}"
    session.add(JobTransition(job_id=job_id, status=S.queued, at=now_sql(session), detail=detail))
    return True


def note(engine: Engine, job_id: int, detail: str) -> bool:
    """A line in a job's timeline that changes nothing (its current status, again): e.g. that a GPU it ran
    on failed its health check (worker/host_watch.py). False: no such job."""
    with Session(engine) as s:
        job = s.get(Job, job_id)
        if job is None:
            return False
        s.add(JobTransition(job_id=job_id, status=job.status, at=now_sql(s), attempt=job.attempt, detail=detail))
        s.commit()
        return True


def _placement_hosts(engine: Engine, job_id: int) -> str:
    job = get_job(engine, job_id)
    try:
        placed = read_placement(job) if job else None
    except BadPlacement:
        placed = None
    return ", ".join(placed.hosts if placed else []) or socket.gethostname()


# --- reading ------------------------------------------------------------------------------------


def get_job(engine: Engine, job_id: int) -> Job | None:
    with Session(engine) as s:
        job = s.get(Job, job_id)
        if job is not None:
            s.expunge(job)
        return job


def status_and_attempt(engine: Engine, job_id: int) -> tuple[JobStatus | None, int]:
    """The row's status and attempt number ((None, 0) when the row is gone)."""
    with Session(engine) as s:
        job = s.get(Job, job_id)
        return (JobStatus(job.status), int(job.attempt)) if job else (None, 0)


def live_view(engine: Engine, job_id: int) -> tuple[JobStatus | None, int, int | None]:
    """The row's status, attempt and preempt_for (what a supervisor polls); (None, 0, None) when gone."""
    with Session(engine) as s:
        job = s.get(Job, job_id)
        return (JobStatus(job.status), int(job.attempt), job.preempt_for) if job else (None, 0, None)


def status_of(engine: Engine, job_id: int) -> JobStatus | None:
    with Session(engine) as s:
        job = s.get(Job, job_id)
        return JobStatus(job.status) if job else None
