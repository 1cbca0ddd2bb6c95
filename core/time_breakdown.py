"""Where a job's wall time went (issue 38): queued, starting, training, checkpointing, lost to restarts, stopped.

`breakdown` is the pure decision: it walks the job's timeline (its transitions) and splits each running
stretch with what that stretch's metric points say; `load` reads those rows (the I/O edge). The parts
always sum to the wall time (created → finished, or → now while the job lives), because every second of
the timeline goes to exactly one part:

- queued: waiting for a place before the first attempt was claimed;
- starting: claimed, its environment, code and checkpoint being provided (status `starting`), plus, once
  its ranks run, the time before their first new step (imports, rendezvous, data, model build);
- lost_to_restarts: in a resumed attempt, the time spent recomputing steps an earlier attempt had already
  done past the checkpoint it resumed from (those steps × the attempt's seconds per step);
- checkpointing: the seconds the training loop stood still for a save (the built-in trainer's
  `time/checkpoint_s` metric, one point per save);
- training: the rest of the running time;
- stopped: back in the queue after an attempt ended (preempted, host lost, a worker's restart) and
  waiting to run again, and `cancelling`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import func, update
from sqlmodel import Session, col, select

from core.tables import Checkpoint, Job, JobStatus, JobTransition, MetricPoint

S = JobStatus
PARTS: tuple[str, ...] = ("queued", "starting", "training", "checkpointing", "lost_to_restarts", "stopped")
CHECKPOINT_SERIES = "time/checkpoint_s"  # the built-in trainer's seconds per save (trainer/train.py `_save`)
_OWN_PREFIXES = ("sys/", "time/")  # series that are not the job's steps (the worker's samples, these timings)


@dataclass(frozen=True)
class RunSpan:
    """What the metric points of one running stretch say (None: no point of the job's own in it)."""

    first_time: float | None = None  # unix seconds of its first new step
    first_step: int | None = None
    last_time: float | None = None
    last_step: int | None = None
    steps_before: int | None = None  # the newest step any earlier stretch reached
    resumed_step: int = 0  # the newest checkpoint's step before it began (0: it started from scratch)
    checkpoint_s: float = 0.0  # seconds of saves inside it

    def step_s(self) -> float | None:
        """Its seconds per step, from its own first and last points."""
        if self.first_step is None or self.last_step is None or self.first_time is None or self.last_time is None:
            return None
        steps = self.last_step - self.first_step
        return (self.last_time - self.first_time) / steps if steps > 0 and self.last_time > self.first_time else None


@dataclass(frozen=True)
class Breakdown:
    wall_s: float
    parts: dict[str, float]  # PARTS, each in seconds, summing to wall_s

    def as_dict(self) -> dict[str, Any]:
        return {"wall_s": round(self.wall_s, 3), **{k: round(v, 3) for k, v in self.parts.items()}}


def stretches(
    created: float, transitions: Sequence[tuple[JobStatus, float]], end: float
) -> list[tuple[JobStatus, float, float]]:
    """The timeline as (status, from, to), created → end: before the first transition the job is queued."""
    out: list[tuple[JobStatus, float, float]] = []
    status, since = S.queued, created
    for to, at in transitions:
        if to == status:
            continue  # a note on the timeline (a retry, a drain), not a change
        at = min(max(at, since), end)  # clocks that disagree never make a stretch negative
        out.append((status, since, at))
        status, since = to, at
    if not status.is_terminal:
        out.append((status, since, max(end, since)))
    return [s for s in out if s[2] > s[1]]


def _split_running(
    since: float, length: float, span: RunSpan | None, fallback_step_s: float | None
) -> dict[str, float]:
    """One running stretch's seconds: starting (before its first step), lost, checkpointing, training."""
    if span is None or span.first_time is None or span.first_step is None:
        ckpt = min(span.checkpoint_s if span else 0.0, length)
        return {"starting": 0.0, "lost_to_restarts": 0.0, "checkpointing": ckpt, "training": length - ckpt}
    step_s = span.step_s() or fallback_step_s or 0.0
    before_first = min(max(span.first_time - since, 0.0), length)  # to its first new point
    # Before that point the ranks started up, then did first_step - resumed_step steps, of which those up to
    # steps_before had been done already by an earlier attempt (their points were not recorded twice).
    work = max(span.first_step - span.resumed_step, 0) * step_s
    redone = max((span.steps_before or 0) - span.resumed_step, 0) * step_s
    lost = min(redone, before_first)
    starting = max(before_first - max(work, redone), 0.0)
    ckpt = min(span.checkpoint_s, length - starting - lost)
    return {
        "starting": starting,
        "lost_to_restarts": lost,
        "checkpointing": ckpt,
        "training": length - starting - lost - ckpt,
    }


def breakdown(
    created: float,
    transitions: Sequence[tuple[JobStatus, float]],
    end: float,
    spans: Sequence[RunSpan | None] = (),
) -> Breakdown:
    """Split created → end (finished, or now) into PARTS. `transitions`: (status, unix time) in order;
    `spans[i]`: what the points of the i-th running stretch say (missing: nothing known, all training)."""
    parts: dict[str, float] = dict.fromkeys(PARTS, 0.0)
    claimed = False
    runs = 0
    timeline = stretches(created, transitions, end)
    rates = [r for s in spans if s is not None and (r := s.step_s()) is not None]
    fallback = sorted(rates)[len(rates) // 2] if rates else None
    wall = 0.0
    for status, since, until in timeline:
        length = until - since
        wall += length
        if status is S.queued:
            parts["stopped" if claimed else "queued"] += length
        elif status is S.starting:
            claimed = True
            parts["starting"] += length
        elif status is S.running:
            claimed = True
            span = spans[runs] if runs < len(spans) else None
            runs += 1
            for key, seconds in _split_running(since, length, span, fallback).items():
                parts[key] += seconds
        else:  # cancelling (terminal states end the timeline)
            parts["stopped"] += length
    return Breakdown(wall_s=wall, parts=parts)


# --- the I/O edge ------------------------------------------------------------------------------------


def unix(at: datetime) -> float:
    """A stored time as unix seconds (SQLite hands back naive UTC)."""
    return (at if at.tzinfo else at.replace(tzinfo=timezone.utc)).timestamp()


def _span(session: Session, job_id: int, since: float, until: float, before_ckpt: int) -> RunSpan:
    own = [MetricPoint.job_id == job_id, *(~col(MetricPoint.name).startswith(p) for p in _OWN_PREFIXES)]
    inside = [col(MetricPoint.time) >= since, col(MetricPoint.time) <= until]
    first = session.exec(
        select(MetricPoint.time, MetricPoint.step).where(*own, *inside).order_by(col(MetricPoint.time)).limit(1)
    ).first()
    if first is None:
        return RunSpan(checkpoint_s=_checkpoint_s(session, job_id, since, until))
    last = session.exec(
        select(MetricPoint.time, MetricPoint.step).where(*own, *inside).order_by(col(MetricPoint.time).desc()).limit(1)
    ).first()
    before = session.exec(select(func.max(MetricPoint.step)).where(*own, col(MetricPoint.time) < since)).first()
    return RunSpan(
        first_time=first[0],
        first_step=first[1],
        last_time=last[0] if last else None,
        last_step=last[1] if last else None,
        steps_before=before,
        resumed_step=before_ckpt,
        checkpoint_s=_checkpoint_s(session, job_id, since, until),
    )


def _checkpoint_s(session: Session, job_id: int, since: float, until: float) -> float:
    total = session.exec(
        select(func.sum(MetricPoint.value)).where(
            MetricPoint.job_id == job_id,
            MetricPoint.name == CHECKPOINT_SERIES,
            col(MetricPoint.time) >= since,
            col(MetricPoint.time) <= until,
        )
    ).first()
    return float(total or 0.0)


def load(session: Session, job: Job, now: datetime | None = None) -> Breakdown:
    """The job's breakdown: the one written at its end, else computed from its rows (to now while it lives)."""
    assert job.id is not None
    if job.status.is_terminal and job.time_breakdown and set(PARTS) <= set(job.time_breakdown):
        parts = {k: float(job.time_breakdown[k]) for k in PARTS}
        return Breakdown(wall_s=sum(parts.values()), parts=parts)
    end = job.finished_at if job.finished_at and job.status.is_terminal else (now or datetime.now(timezone.utc))
    return compute(session, job.id, job.created_at, end)


def compute(session: Session, job_id: int, created_at: datetime, end_at: datetime) -> Breakdown:
    """The breakdown from the job's rows: transitions, metric points, checkpoints."""
    rows = session.exec(
        select(JobTransition.status, JobTransition.at)
        .where(JobTransition.job_id == job_id)
        .order_by(col(JobTransition.id))
    ).all()
    transitions = [(status, unix(at)) for status, at in rows]
    created, end = unix(created_at), unix(end_at)
    checkpoints = session.exec(
        select(Checkpoint.step, Checkpoint.created_at).where(Checkpoint.job_id == job_id).order_by(col(Checkpoint.step))
    ).all()
    spans: list[RunSpan | None] = []
    for status, since, until in stretches(created, transitions, end):
        if status is S.running:
            before_ckpt = max((step for step, at in checkpoints if unix(at) <= since), default=0)
            spans.append(_span(session, job_id, since, until, before_ckpt))
    return breakdown(created, transitions, end, spans)


def record(session: Session, job_id: int) -> None:
    """Write a job's breakdown at its terminal transition (same transaction, after the row's UPDATE), so that
    /metrics sums finished jobs in the database (api/observability/snapshot.py). The caller commits."""
    row = session.exec(select(Job.created_at, Job.finished_at).where(Job.id == job_id)).first()
    if row is None or row[1] is None:
        return
    parts = compute(session, job_id, row[0], row[1]).parts
    session.execute(
        update(Job).where(col(Job.id) == job_id).values(time_breakdown={k: round(v, 3) for k, v in parts.items()})
    )
