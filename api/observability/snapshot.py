"""What /metrics reports, read from the database at scrape time into a plain value (`Snapshot`).

Reading is the only I/O here; turning a snapshot into metric families is api/observability/collector.py
(pure). The hosts' numbers come from the same function as GET /api/hosts, so the two never disagree.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.engine import Engine
from sqlmodel import Session, col

from api.models import HostPublic
from core import time_breakdown
from core.db import db_now
from core.job_state import TERMINAL
from core.tables import Job, JobStatus, MetricPoint, NotificationDelivery, SchedulerLease, User

# Seconds a job waits in the queue: from a moment to a day.
QUEUE_WAIT_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 4 * 3600.0, 12 * 3600.0, 86400.0)
# Running jobs reported one by one (labels job and name): bounded, whatever the service holds.
MAX_JOB_SERIES = 200


@dataclass(frozen=True)
class RunningJob:
    id: int
    name: str
    pool: str
    step: int
    total_steps: int | None
    samples_per_s: float | None
    latest_loss: float | None


@dataclass(frozen=True)
class Snapshot:
    jobs: dict[tuple[str, str], int]  # (status, pool) → count
    queued_ages_s: dict[str, float]  # pool → age of its oldest queued job
    # Over every started job, seconds from submit to its first start: how many ≤ each of QUEUE_WAIT_BUCKETS,
    # how many in all, and their sum (counted by the database: a scrape never fetches the whole table).
    queue_wait_le: tuple[int, ...]
    queue_wait_count: int
    queue_wait_sum_s: float
    hosts: list[HostPublic]
    running: list[RunningJob]
    points_ingested: int  # metric points ever written (the highest id: cheap and monotonic)
    deliveries: dict[str, int]  # notification delivery state → count
    scheduler_lease_age_s: float | None  # since the active scheduler last renewed its lease
    # (user, pool, part) → seconds of wall time (core/time_breakdown.py PARTS): finished jobs' kept
    # breakdowns, summed by the database.
    job_seconds: dict[tuple[str, str, str], float] = field(default_factory=dict)
    now: datetime = field(default_factory=lambda: datetime.now(timezone.utc))


def _aware(ts: datetime) -> datetime:
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=timezone.utc)  # SQLite hands back naive UTC


def _wait_seconds(dialect: str) -> Any:
    """started_at - created_at in seconds, as the database computes it."""
    if dialect == "postgresql":
        return func.extract("epoch", col(Job.started_at) - col(Job.created_at))
    return (func.julianday(col(Job.started_at)) - func.julianday(col(Job.created_at))) * 86400.0


def read(engine: Engine, hosts: list[HostPublic]) -> Snapshot:
    """One consistent-enough look at the tables (each statement its own snapshot, as the read routes do)."""
    now = db_now(engine)
    with Session(engine) as s:
        by_status = s.execute(
            select(col(Job.status), col(Job.queue), func.count()).group_by(col(Job.status), col(Job.queue))
        ).all()
        oldest = s.execute(
            select(col(Job.queue), func.min(col(Job.created_at)))
            .where(col(Job.status) == JobStatus.queued)
            .group_by(col(Job.queue))
        ).all()
        wait = _wait_seconds(engine.dialect.name)
        waits = s.execute(
            select(
                func.count(), func.coalesce(func.sum(wait), 0.0),
                *[func.coalesce(func.sum(case((wait <= b, 1), else_=0)), 0) for b in QUEUE_WAIT_BUCKETS],
            ).where(col(Job.started_at).isnot(None))
        ).one()  # fmt: skip
        running = s.execute(
            select(
                col(Job.id), col(Job.name), col(Job.queue), col(Job.step), col(Job.total_steps),
                col(Job.samples_per_s), col(Job.latest_loss),
            )
            .where(col(Job.status) == JobStatus.running)
            .order_by(col(Job.id))
            .limit(MAX_JOB_SERIES)
        ).all()  # fmt: skip
        points = s.execute(select(func.max(col(MetricPoint.id)))).scalar() or 0
        deliveries = s.execute(
            select(col(NotificationDelivery.state), func.count()).group_by(col(NotificationDelivery.state))
        ).all()
        lease = s.execute(select(col(SchedulerLease.renewed_at))).scalar()
        job_seconds = _job_seconds(s)
    return Snapshot(
        jobs=Counter({(JobStatus(st).value, pool or ""): int(n) for st, pool, n in by_status}),
        queued_ages_s={pool or "": max(0.0, (now - _aware(t)).total_seconds()) for pool, t in oldest if t},
        queue_wait_le=tuple(int(n) for n in waits[2:]),
        queue_wait_count=int(waits[0]),
        queue_wait_sum_s=max(0.0, float(waits[1])),
        hosts=hosts,
        running=[RunningJob(*row) for row in running],
        points_ingested=int(points),
        deliveries={str(state): int(n) for state, n in deliveries},
        scheduler_lease_age_s=None if lease is None else max(0.0, (now - _aware(lease)).total_seconds()),
        job_seconds=job_seconds,
        now=now,
    )


def _job_seconds(s: Session) -> dict[tuple[str, str, str], float]:
    """Finished jobs' wall time per user, pool and part, summed by the database from the breakdown each kept
    at its end: one aggregate query, and a counter that only grows (a live job's is in its REST detail)."""
    kept = col(Job.time_breakdown)
    owner = select(col(User.name)).where(col(User.id) == col(Job.owner_id)).scalar_subquery()
    finished = s.execute(
        select(owner, col(Job.queue), *[func.sum(kept[p].as_float()) for p in time_breakdown.PARTS])
        .where(col(Job.status).in_(list(TERMINAL)))
        .group_by(owner, col(Job.queue))
    ).all()
    out: defaultdict[tuple[str, str, str], float] = defaultdict(float)
    for user, pool, *seconds in finished:
        for part, value in zip(time_breakdown.PARTS, seconds, strict=True):
            out[(user or "", pool or "", part)] += float(value or 0.0)
    return dict(out)
