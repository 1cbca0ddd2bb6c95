"""When a queued job will start (issue 38): its position in its pool's queue and an estimated start.

`estimate` is the pure decision: the pool's units (GPUs, or CPU slots) are freed as the jobs holding them
end (a running job's steps left at its step rate measured over its last train/loss points, else its
reported ETA, else what is left of its max_runtime_s),
and the queued jobs take them in the scheduler's order (core/placement_types.py `queue_order`), each
starting once enough are free and then holding them for its own max_runtime_s. It is an estimate:
it pools the units of the pool's hosts (a job that needs them on one host may wait longer), and a
job with no known end (no rate reported yet, no max_runtime_s) makes everything behind it unknown,
which it says. `load` reads the rows (the I/O edge).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import or_
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from core import hosts
from core.job_state import HOLDING
from core.tables import Job, JobStatus, MetricPoint

S = JobStatus
GPU, SLOT = "gpu", "slot"


@dataclass(frozen=True)
class Holder:
    """A job holding units now (live, or placed and about to start)."""

    job_id: int
    units: int
    remaining_s: float | None  # None: its end is not known


@dataclass(frozen=True)
class Queued:
    """A queued job not yet placed, in queue order."""

    job_id: int
    units: int
    duration_s: float | None  # how long it will hold its units once started (None: not known)


@dataclass(frozen=True)
class Estimate:
    job_id: int
    position: int  # 1: next in its pool (and kind of unit)
    start_in_s: float | None  # None: not known (see why)
    why: str

    def as_dict(self, now: float) -> dict[str, Any]:
        at = None if self.start_in_s is None else datetime.fromtimestamp(now + self.start_in_s, timezone.utc)
        return {
            "position": self.position,
            "start_in_s": None if self.start_in_s is None else round(self.start_in_s, 1),
            "start_at": at.isoformat() if at else None,
            "why": self.why,
        }


def estimate(capacity: int, holders: Sequence[Holder], queued: Sequence[Queued]) -> list[Estimate]:
    """Each queued job's position and start, in seconds from now (see the module's docstring)."""
    free = capacity - sum(h.units for h in holders)
    ends: list[tuple[float, int, int]] = [
        (math.inf if h.remaining_s is None else max(h.remaining_s, 0.0), h.job_id, h.units) for h in holders
    ]
    heapq.heapify(ends)
    out: list[Estimate] = []
    t = 0.0
    after: int | None = None  # the job whose end freed the last units it took
    for position, q in enumerate(queued, start=1):
        if q.units > capacity:
            out.append(Estimate(q.job_id, position, None, f"needs {q.units} of the pool's {capacity} units at once"))
            continue
        while free < q.units and ends and ends[0][0] < math.inf:
            end, job_id, units = heapq.heappop(ends)
            t, free, after = max(t, end), free + units, job_id
        if free < q.units:
            blocker = ends[0][1] if ends else None
            why = f"after job {blocker}, whose end is not known yet" if blocker is not None else "not known"
            out.append(Estimate(q.job_id, position, None, why))
            t = math.inf  # the queue is taken in order: everything behind waits on it too
            continue
        if t == math.inf:
            out.append(Estimate(q.job_id, position, None, out[-1].why if out else "not known"))
            continue
        free -= q.units
        heapq.heappush(ends, (math.inf if q.duration_s is None else t + q.duration_s, q.job_id, q.units))
        why = "units free now" if after is None else f"when job {after} ends"
        out.append(Estimate(q.job_id, position, t, why))
    return out


# --- the I/O edge ------------------------------------------------------------------------------------


def _kind(spec: dict[str, Any], pool_has_gpus: bool) -> str:
    return GPU if pool_has_gpus and spec.get("device") != "cpu" else SLOT


def _units(spec: dict[str, Any]) -> int:
    nproc, nnodes = spec.get("nproc", 1), spec.get("nnodes", 1)
    return (nproc if isinstance(nproc, int) else 1) * (nnodes if isinstance(nnodes, int) else 1)


def _placed_units(placement: dict[str, Any]) -> int:
    nodes = placement.get("nodes") or []
    return sum(len(n.get("gpus") or []) or int(n.get("slots") or 0) for n in nodes if isinstance(n, dict))


RATE_SERIES = "train/loss"  # the built-in trainer's (and the SDK's usual) per-step series
RATE_STEPS = 50  # its last steps measure a running job's seconds per step


def _measured_remaining(session: Session, job: Job, now: float) -> float | None:
    """Steps left × seconds per step over its last RATE_STEPS points, less the time since its last one: the
    rate as measured here (a trainer's own ETA may leave out its per-step overhead)."""
    if job.total_steps is None or job.id is None:
        return None
    points = session.exec(
        select(MetricPoint.step, MetricPoint.time)
        .where(MetricPoint.job_id == job.id, MetricPoint.name == RATE_SERIES, MetricPoint.step >= job.step - RATE_STEPS)
        .order_by(col(MetricPoint.step))
    ).all()
    if len(points) < 2 or points[-1][0] <= points[0][0] or points[-1][1] <= points[0][1]:
        return None
    step_s = (points[-1][1] - points[0][1]) / (points[-1][0] - points[0][0])
    return max((job.total_steps - points[-1][0]) * step_s - (now - points[-1][1]), 0.0)


def _remaining(session: Session, job: Job, now: float) -> float | None:
    """A live job's seconds to go: steps left at its measured step rate, else its ETA, else what is left of
    its max_runtime_s."""
    if job.status == S.running:
        measured = _measured_remaining(session, job, now)
        if measured is not None:
            return measured
        if job.eta_s is not None:
            return job.eta_s
    limit = job.spec.get("max_runtime_s")
    if isinstance(limit, int) and job.started_at is not None:
        started = job.started_at if job.started_at.tzinfo else job.started_at.replace(tzinfo=timezone.utc)
        return max(limit - (now - started.timestamp()), 0.0)
    return None


def _order(job: Job) -> tuple[int, float, int]:
    created = job.created_at if job.created_at.tzinfo else job.created_at.replace(tzinfo=timezone.utc)
    return (-job.priority, created.timestamp(), job.id or 0)  # core/placement_types.py queue_order


def pool_estimates(
    session: Session, jobs: Iterable[Job], capacity: dict[str, int], pool_has_gpus: bool, now: float
) -> dict[int, Estimate]:
    """One pool's holding jobs → each unplaced queued job's estimate (per kind of unit)."""
    by_kind: dict[str, tuple[list[Holder], list[Job]]] = {GPU: ([], []), SLOT: ([], [])}
    for job in jobs:
        assert job.id is not None
        holders, waiting = by_kind[_kind(job.spec, pool_has_gpus)]
        if job.status == S.queued and not job.placement:
            waiting.append(job)
        else:
            units = _placed_units(job.placement) if job.placement else _units(job.spec)
            holders.append(Holder(job.id, units, _remaining(session, job, now)))
    out: dict[int, Estimate] = {}
    for kind, (holders, waiting) in by_kind.items():
        queued = [
            Queued(j.id or 0, _units(j.spec), d if isinstance(d := j.spec.get("max_runtime_s"), int) else None)
            for j in sorted(waiting, key=_order)
        ]
        out.update({e.job_id: e for e in estimate(capacity.get(kind, 0), holders, queued)})
    return out


def load(
    session: Session, pool: str, stale_after_s: float, *, default_pool: str, now: datetime | None = None
) -> dict[int, Estimate]:
    """Every unplaced queued job of `pool`: its position and estimated start, from the rows (a job with no
    pool is the default pool's)."""
    when = (now or datetime.now(timezone.utc)).timestamp()
    bind = session.get_bind()
    engine = bind if isinstance(bind, Engine) else bind.engine
    views = [h.view() for h in hosts.read_all(engine, stale_after_s) if h.pool == pool and h.alive]
    capacity = {GPU: sum(len(v.gpus) for v in views), SLOT: sum(v.cpu_slots for v in views)}
    in_pool = col(Job.queue) == pool
    if pool == default_pool:
        in_pool = or_(in_pool, col(Job.queue).is_(None))
    jobs = session.exec(select(Job).where(col(Job.status).in_(list(HOLDING)), in_pool)).all()
    return pool_estimates(session, jobs, capacity, capacity[GPU] > 0, when)
