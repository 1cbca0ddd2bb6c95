"""A host that keeps failing jobs leaves placement (issue 38), as a GPU with Xid errors does (worker/gpu_health.py).

A job's attempt that ends for a reason that is not its own fault counts against the host that ran it
(node 0, the host that claimed it): its host was lost (a requeue or failure "… host losses"), its
launch failed (torchrun could not start), or the worker could not prepare it ("worker error"). A job's
own failures (its exception, its environment's requirements, a missing checkpoint or bundle) never
count, and an attempt that succeeds on the host clears its record. `FAULTS_TO_DRAIN` of them within
`WINDOW_S` and the host is drained with the reason (its `drain_note`, shown by GET /api/hosts, the Hosts
page and `rankzero hosts`); an admin puts it back with `rankzero hosts undrain NAME` (POST
/api/hosts/NAME/undrain).

`fault_of` and `verdict` are the pure decisions; `note` (called by core/jobs.py `transition`, in the
same transaction) reads the host's recent outcomes and writes the drain.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from sqlalchemy import and_, update
from sqlalchemy import select as sa_select
from sqlalchemy.orm import aliased
from sqlmodel import Session, col, select

from core.tables import Host, Job, JobStatus, JobTransition

S = JobStatus
FAULTS_TO_DRAIN = 3
WINDOW_S = 3600.0
CLAIMED = "claimed by "  # core/jobs.py claim's detail: "claimed by HOST[, HOST…]" (node 0 first)
# Transition details that say the host, not the job, ended the attempt (worker/decide.py host_loss,
# worker/node_zero.py _fail_before_launch).
_HOST_FAULT_WORDS = ("host losses", "launch failed", "worker error")


def fault_of(status: JobStatus, detail: str | None) -> str | None:
    """What a transition says went wrong with the host (None: not the host's fault, or not an end)."""
    if status not in (S.queued, S.failed) or not detail:
        return None
    return detail if any(w in detail for w in _HOST_FAULT_WORDS) else None


@dataclass(frozen=True)
class Outcome:
    """How one attempt on the host ended."""

    at: float  # unix seconds
    job_id: int
    fault: str | None  # None: it succeeded


def verdict(host: str, outcomes: Sequence[Outcome], now: float) -> str | None:
    """The drain note when the host's faults since its last success within the window reach FAULTS_TO_DRAIN."""
    recent = sorted((o for o in outcomes if o.at >= now - WINDOW_S), key=lambda o: o.at)
    faults: list[Outcome] = []
    for o in recent:
        faults = [] if o.fault is None else [*faults, o]
    if len(faults) < FAULTS_TO_DRAIN:
        return None
    said = "; ".join(f"job {o.job_id}: {o.fault[:120]}" for o in faults[-FAULTS_TO_DRAIN:] if o.fault)
    return (
        f"taken out of placement: {len(faults)} jobs in a row failed here within {int(WINDOW_S // 60)} min for "
        f"reasons that were not their own ({said}); check the host, then `rankzero hosts undrain {host}`"
    )


def _host_of(claimed: str | None) -> str | None:
    if not claimed or not claimed.startswith(CLAIMED):
        return None
    return claimed.removeprefix(CLAIMED).split(",")[0].strip() or None


def _unix(at: datetime) -> float:
    return (at if at.tzinfo else at.replace(tzinfo=timezone.utc)).timestamp()


def note(session: Session, job_id: int, to: JobStatus, detail: str | None) -> str | None:
    """After an attempt's end was written: when it was the host's fault and the host has now failed
    FAULTS_TO_DRAIN jobs in a row, drain it with the reason (returned). The caller commits."""
    if fault_of(to, detail) is None:
        return None
    attempt = session.exec(select(Job.attempt).where(Job.id == job_id)).first()
    claim = session.exec(
        select(JobTransition.detail)
        .where(JobTransition.job_id == job_id, JobTransition.attempt == attempt, JobTransition.status == S.starting)
        .order_by(col(JobTransition.id).desc())
    ).first()
    host = _host_of(claim)
    if host is None:
        return None
    now = datetime.now(timezone.utc)
    start = aliased(JobTransition)
    end = aliased(JobTransition)
    same_attempt = and_(
        col(start.job_id) == col(end.job_id), col(start.attempt) == col(end.attempt), col(start.status) == S.starting
    )
    rows = session.execute(
        sa_select(col(end.job_id), col(end.status), col(end.at), col(end.detail), col(start.detail))
        .join(start, same_attempt)
        .where(
            col(end.status).in_([S.queued, S.failed, S.succeeded]),
            col(end.at) >= now - timedelta(seconds=WINDOW_S),
            col(end.attempt) > 0,
            col(start.detail).startswith(f"{CLAIMED}{host}"),
        )
    ).all()
    outcomes = [
        Outcome(_unix(at), jid, fault_of(status, text))
        for jid, status, at, text, claimed in rows
        if _host_of(claimed) == host and (status == S.succeeded or fault_of(status, text) is not None)
    ]
    reason = verdict(host, outcomes, now.timestamp())
    if reason is not None:
        session.execute(
            update(Host)
            .where(col(Host.name) == host, col(Host.drain_requested).is_(False))
            .values(drain_requested=True, drain_note=reason)
        )
    return reason
