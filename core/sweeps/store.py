"""A sweep's rows: create, read with its trials, cancel / pause / resume (the API and the driver use these)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.engine import Engine
from sqlmodel import Session, col

from core import jobs, notify, wake
from core.job_state import LIVE
from core.sweeps.decide import TrialState, TrialView
from core.sweeps.space import SweepSpec
from core.tables import Job, JobStatus, MetricPoint, Sweep, SweepTrial, utcnow

S = JobStatus
STATUSES = ("running", "paused", "cancelled", "finished")
ACTIVE = ("running", "paused")  # the driver's business


def trial_state(status: JobStatus) -> TrialState:
    if status in (S.succeeded, S.failed, S.cancelled):
        return status.value  # type: ignore[return-value]  (the three terminal names are TrialState's)
    return "live"


def _wake(session: Session) -> None:
    """Wake the scheduler (whose pass runs the sweep driver) once this session commits."""
    bind = session.get_bind()
    wake.after_commit(bind if isinstance(bind, Engine) else bind.engine)


def create(
    session: Session,
    spec: SweepSpec,
    queue: str,
    owner_id: int | None = None,
    before_commit: Callable[[Sweep], None] | None = None,
) -> Sweep:
    """Insert a running sweep (its trials come at the driver's next pass), committed; the scheduler is woken.
    `before_commit` adds rows to the same transaction (the audit log's)."""
    row = Sweep(
        name=spec.name,
        spec=spec.model_dump(mode="json", by_alias=True),
        status="running",
        queue=queue,
        owner_id=owner_id,
    )
    session.add(row)
    if before_commit is not None:
        session.flush()
        before_commit(row)
    _wake(session)  # the scheduler's pass runs the driver: the first trials start at once
    session.commit()
    session.refresh(row)
    return row


def trials(session: Session, sweep: Sweep, with_series: bool = True) -> list[tuple[SweepTrial, Job, TrialView]]:
    """The sweep's trials in number order, each with its job and the view the decisions take."""
    spec = SweepSpec.model_validate(sweep.spec)
    rows = session.execute(
        select(SweepTrial, Job)
        .join(Job, col(Job.id) == col(SweepTrial.job_id))
        .where(col(SweepTrial.sweep_id) == sweep.id)
        .order_by(col(SweepTrial.number))
    ).all()
    series = _series(session, [job.id for _, job in rows if job.id is not None], spec.metric) if with_series else {}
    out = []
    for trial, job in rows:
        view = TrialView(
            number=trial.number,
            job_id=int(trial.job_id),
            params=trial.params,
            state=trial_state(JobStatus(job.status)),
            pruned=trial.pruned,
            series=series.get(int(trial.job_id), {}),
            rungs=trial.rungs or {},
        )
        out.append((trial, job, view))
    return out


def _series(session: Session, job_ids: Iterable[int], metric: str) -> dict[int, dict[int, float]]:
    """The metric's values by step, per job (the last point of a step wins: a re-run step reports again)."""
    ids = list(job_ids)
    out: dict[int, dict[int, float]] = {i: {} for i in ids}
    if not ids:
        return out
    points = session.execute(
        select(col(MetricPoint.job_id), col(MetricPoint.step), col(MetricPoint.value))
        .where(col(MetricPoint.job_id).in_(ids), col(MetricPoint.name) == metric)
        .order_by(col(MetricPoint.seq))
    ).all()
    for job_id, step, value in points:
        out[int(job_id)][int(step)] = float(value)
    return out


def set_status(session: Session, sweep_id: int, to: str, expect: tuple[str, ...], note: str | None = None) -> bool:
    """Move the sweep to `to` if it is in one of `expect` (a conditional UPDATE); the caller commits."""
    values: dict[str, Any] = {"status": to}
    if to in ("cancelled", "finished"):
        values["finished_at"] = utcnow()
    if note is not None:
        values["note"] = note[:2000]
    result = session.execute(
        update(Sweep).where(col(Sweep.id) == sweep_id, col(Sweep.status).in_(expect)).values(**values)
    )
    moved = getattr(result, "rowcount", 0) == 1
    if moved:  # its end is told to the owner's webhooks and the server's, in this transaction (issue 37)
        notify.record_sweep_end(session, sweep_id, to, note)
    return moved


def stop_trial(session: Session, job_id: int, detail: str) -> bool:
    """Stop a trial's job the way a cancel does (queued → cancelled; starting/running → cancelling: the
    worker SIGTERMs the ranks, which checkpoint and exit). The caller commits."""
    for _ in range(3):  # the worker may move the job between our read and our conditional update
        current = session.execute(select(col(Job.status)).where(col(Job.id) == job_id)).scalar_one_or_none()
        if current is None or JobStatus(current) not in (S.queued, S.starting, S.running):
            return False
        target = S.cancelled if current == S.queued else S.cancelling
        if jobs.transition(session, job_id, target, expect=JobStatus(current), detail=detail):
            return True
    return False


def cancel(session: Session, sweep: Sweep) -> int:
    """Cancel the sweep and every trial still queued or running; returns how many trials were stopped."""
    assert sweep.id is not None
    if not set_status(session, sweep.id, "cancelled", ACTIVE, note="cancelled"):
        return 0
    live = (
        session.execute(
            select(col(Job.id))
            .join(SweepTrial, col(SweepTrial.job_id) == col(Job.id))
            .where(col(SweepTrial.sweep_id) == sweep.id, col(Job.status).in_([*LIVE, S.queued]))
        )
        .scalars()
        .all()
    )
    stopped = sum(1 for job_id in live if stop_trial(session, int(job_id), f"sweep {sweep.id} cancelled"))
    _wake(session)
    session.commit()
    return stopped
