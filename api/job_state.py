"""Job state machine: which transitions are legal, and the one function that makes them.

queued → starting → running → succeeded | failed | cancelled, with cancelling in between;
starting/running → queued when a worker hands a job back (graceful shutdown, restart).
Every transition is a conditional UPDATE (so two actors cannot both win) plus a timeline row.
"""

from __future__ import annotations

from sqlalchemy import update
from sqlmodel import Session

from api.tables import Job, JobStatus, JobTransition, utcnow

S = JobStatus
ALLOWED: dict[JobStatus, frozenset[JobStatus]] = {
    S.queued: frozenset({S.starting, S.cancelled, S.failed}),
    S.starting: frozenset({S.running, S.failed, S.cancelling, S.cancelled, S.queued, S.succeeded}),
    S.running: frozenset({S.succeeded, S.failed, S.cancelling, S.queued}),
    S.cancelling: frozenset({S.cancelled, S.failed, S.succeeded}),
    S.succeeded: frozenset(),
    S.failed: frozenset(),
    S.cancelled: frozenset(),
}


class IllegalTransition(ValueError):
    pass


def transition(
    session: Session,
    job_id: int,
    to: JobStatus,
    *,
    expect: JobStatus | set[JobStatus] | frozenset[JobStatus] | None = None,
    detail: str | None = None,
    **fields: object,
) -> bool:
    """Move job `job_id` to `to` if it is in one of `expect` (default: any state allowed to reach `to`).

    Returns False, changing nothing, when the job was not in an expected state (someone else won).
    Extra `fields` are written in the same UPDATE. The caller commits.
    """
    if expect is None:
        sources = {src for src, dsts in ALLOWED.items() if to in dsts}
    else:
        sources = {expect} if isinstance(expect, JobStatus) else set(expect)
        bad = [s for s in sources if to not in ALLOWED[s]]
        if bad:
            raise IllegalTransition(f"{', '.join(s.value for s in bad)} → {to.value} is not a legal job transition")
    now = utcnow()
    values: dict[str, object] = {"status": to, **fields}
    if to is S.running and "started_at" not in fields:
        values["started_at"] = now
    if to.is_terminal:
        values["finished_at"] = now
    result = session.execute(
        update(Job).where(Job.id == job_id, Job.status.in_(sources)).values(**values)  # type: ignore[attr-defined]
    )
    if result.rowcount != 1:
        return False
    attempt = session.get(Job, job_id)
    session.add(JobTransition(job_id=job_id, status=to, at=now, attempt=attempt.attempt if attempt else 0, detail=detail))
    return True
