"""Sweeps: create one, list them, show one with its trials, cancel / pause / resume it, and resume its
best trial for longer. The driver (core/sweeps/driver.py, in the scheduler) makes the trials."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query, status
from pydantic import BaseModel, Field
from sqlmodel import Session, col, select

from api import submit_policy
from api.auth import may_change_job, permit
from api.deps import CurrentUser, SessionDep, SettingsDep, SweepStarter
from api.models import ErrorDetail, JobPublic
from api.models_sweeps import SweepDetail, SweepPage, SweepPublic
from api.routes.jobs import check_priority_ceiling
from core import audit, jobs, quota_gate
from core.artifacts import keys
from core.resume import extend_refusal, longer_script_spec, resume_spec
from core.settings import Settings
from core.sweeps import store
from core.sweeps.space import SweepSpec, _probe_points, trial_spec
from core.tables import Checkpoint, Job, Sweep
from core.users import Principal
from trainer.spec import JobSpec

router = APIRouter(tags=["sweeps"])
SweepId = Annotated[int, Path(ge=1, le=2**31 - 1)]
MAX_PAGE = 100  # each sweep in the list reads its trials' metric: keep pages small


def _sweep_or_404(session: Session, sweep_id: int) -> Sweep:
    row = session.get(Sweep, sweep_id)
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no sweep {sweep_id}")
    return row


def _may_change(who: Principal, row: Sweep, action: str) -> None:
    """core/permissions.py's rule for `action` on this sweep (members their own, admins any): 403 otherwise."""
    permit(who, action, row.owner_id, f"sweep {row.id}")


def _check_policy(spec: SweepSpec, settings: Settings) -> None:
    """What the server refuses of a job (api/submit_policy.py), asked of the trials at the space's corners."""
    for values in _probe_points(spec):
        try:
            submit_policy.apply(JobSpec.model_validate(trial_spec(spec, values, 0)), settings)
        except submit_policy.SpecRefused as exc:
            where = ", ".join(f"{k}={v!r}" for k, v in values.items())
            loc = ["job", *exc.loc]
            raise HTTPException(
                422, [{"loc": loc, "msg": f"the trial with {where}: {exc.msg}", "type": "value_error"}]
            ) from None
    if spec.job.get("resume_from"):
        raise HTTPException(
            422,
            [
                {
                    "loc": ["job", "resume_from"],
                    "msg": "a sweep's trials start fresh: remove resume_from (resume the best trial afterwards)",
                    "type": "value_error",
                }
            ],
        )


@router.post(
    "/sweeps",
    status_code=status.HTTP_201_CREATED,
    response_model=SweepPublic,
    responses={422: {"description": "The sweep, or one of its corner trials, is invalid or refused."}},
)
def create_sweep(spec: SweepSpec, session: SessionDep, settings: SettingsDep, who: SweepStarter) -> SweepPublic:
    """Start a sweep: its first `parallel` trials are queued at the scheduler's next pass (at once), each within
    its owner's queued quota (a trial past it waits for a later pass)."""
    _check_policy(spec, settings)
    base = spec.job.get("priority", 0)
    check_priority_ceiling(session, who, base if isinstance(base, int) else 0)
    pool = spec.job.get("pool")  # checked with the corner trials (submit_policy.check_pool): it exists
    row = store.create(
        session,
        spec,
        pool if isinstance(pool, str) else settings.queue,
        owner_id=who.user_id,
        before_commit=lambda r: audit.record(session, who, "sweep.create", f"sweep {r.id}", r.name),
    )
    return SweepPublic.of(row)


@router.get("/sweeps", response_model=SweepPage)
def list_sweeps(session: SessionDep, limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50) -> SweepPage:
    """The newest sweeps first (without their trials: GET /api/sweeps/{id})."""
    rows = session.exec(select(Sweep).order_by(col(Sweep.id).desc()).limit(limit)).all()
    return SweepPage(sweeps=[SweepPublic.of(r, [v for _, _, v in store.trials(session, r)]) for r in rows])


@router.get("/sweeps/{sweep_id}", response_model=SweepDetail, responses={404: {"model": ErrorDetail}})
def get_sweep(sweep_id: SweepId, session: SessionDep) -> SweepDetail:
    """A sweep with its trials, best first, the best marked."""
    row = _sweep_or_404(session, sweep_id)
    return SweepDetail.detail(row, store.trials(session, row))


@router.post(
    "/sweeps/{sweep_id}/cancel",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=SweepPublic,
    responses={404: {"model": ErrorDetail}, 409: {"model": ErrorDetail}},
)
def cancel_sweep(sweep_id: SweepId, session: SessionDep, who: CurrentUser) -> SweepPublic:
    """Cancel the sweep and stop its queued and running trials (each checkpoints as a cancelled job does)."""
    row = _sweep_or_404(session, sweep_id)
    _may_change(who, row, "sweep.cancel")
    if row.status not in store.ACTIVE:
        raise HTTPException(status.HTTP_409_CONFLICT, f"sweep {sweep_id} already {row.status}; nothing to cancel")
    audit.record(session, who, "sweep.cancel", f"sweep {sweep_id}", f"was {row.status}")  # committed by cancel
    store.cancel(session, row)
    session.refresh(row)
    return SweepPublic.of(row)


def _move(session: Session, who: Principal, sweep_id: int, to: str, expect: tuple[str, ...]) -> SweepPublic:
    row = _sweep_or_404(session, sweep_id)
    _may_change(who, row, "sweep.pause")
    if row.status == to:
        return SweepPublic.of(row)
    if not store.set_status(session, sweep_id, to, expect, note=f"{to} by request"):
        raise HTTPException(status.HTTP_409_CONFLICT, f"sweep {sweep_id} is {row.status}: it cannot be {to}")
    audit.record(session, who, "sweep.pause" if to == "paused" else "sweep.resume", f"sweep {sweep_id}")
    store._wake(session)
    session.commit()
    session.refresh(row)
    return SweepPublic.of(row)


@router.post(
    "/sweeps/{sweep_id}/pause",
    response_model=SweepPublic,
    responses={404: {"model": ErrorDetail}, 409: {"model": ErrorDetail}},
)
def pause_sweep(sweep_id: SweepId, session: SessionDep, who: CurrentUser) -> SweepPublic:
    """Start no new trial (those running go on, and may still be pruned)."""
    return _move(session, who, sweep_id, "paused", ("running",))


@router.post(
    "/sweeps/{sweep_id}/resume",
    response_model=SweepPublic,
    responses={404: {"model": ErrorDetail}, 409: {"model": ErrorDetail}},
)
def resume_sweep(sweep_id: SweepId, session: SessionDep, who: CurrentUser) -> SweepPublic:
    """Start trials again, up to `parallel` at once."""
    return _move(session, who, sweep_id, "running", ("paused",))


class Extend(BaseModel):
    max_steps: int | None = Field(
        None,
        ge=1,
        le=1_000_000_000,
        description="Train to this step (default: twice as long; a script: its length param, e.g. params.steps, "
        "is set to it).",
    )


@router.post(
    "/sweeps/{sweep_id}/extend-best",
    status_code=status.HTTP_201_CREATED,
    response_model=JobPublic,
    responses={404: {"model": ErrorDetail}, 409: {"model": ErrorDetail}},
)
def extend_best(
    sweep_id: SweepId, body: Extend, session: SessionDep, settings: SettingsDep, who: CurrentUser
) -> JobPublic:
    """Resume the best trial from its newest checkpoint for longer: one new job (as `rankzero resume` makes),
    the caller's. Only the sweep's owner or an admin (core/permissions.py `sweep.extend`), within the caller's
    queued quota."""
    row = _sweep_or_404(session, sweep_id)
    _may_change(who, row, "sweep.extend")
    refusal = extend_refusal(SweepSpec.model_validate(row.spec).job)
    if refusal is not None:  # the template's own reason first: it holds whatever its trials have done
        raise HTTPException(status.HTTP_409_CONFLICT, f"the best trial cannot be trained longer: {refusal}")
    head = SweepPublic.of(row, [v for _, _, v in store.trials(session, row)])
    if head.best_job_id is None:
        raise HTTPException(status.HTTP_409_CONFLICT, f"sweep {sweep_id} has no finished trial with its metric yet")
    job = session.get(Job, head.best_job_id)
    newest = session.exec(
        select(Checkpoint).where(col(Checkpoint.job_id) == head.best_job_id).order_by(col(Checkpoint.step).desc())
    ).first()
    if job is None or newest is None:
        raise HTTPException(status.HTTP_409_CONFLICT, f"job {head.best_job_id} (the best trial) has no checkpoint")
    may_change_job(who, job.owner_id, int(job.id or 0), "job.resume")  # a resume's rule, as POST /api/jobs's
    check_priority_ceiling(session, who, int(job.spec.get("priority") or 0))
    at = keys.job_key(int(job.id or 0), newest.path)  # its key: wherever the trial ran, never a host's path
    if job.spec.get("entrypoint"):  # a script's length is its own: raised through its length param, if it has one
        template = SweepSpec.model_validate(row.spec).job
        try:
            spec, _ = longer_script_spec(template, job.spec, checkpoint_step=newest.step, resume_from=at,
                                         steps=body.max_steps)  # fmt: skip
        except ValueError as exc:
            raise HTTPException(status.HTTP_409_CONFLICT, f"the best trial cannot be trained longer: {exc}") from None
    else:
        longer = body.max_steps or max(newest.step + 1, 2 * (job.total_steps or newest.step))
        spec, _ = resume_spec(
            job.spec, total_steps=job.total_steps, checkpoint_step=newest.step, resume_from=at, max_steps=longer
        )
    try:
        checked = submit_policy.apply(JobSpec.model_validate(spec), settings)
    except submit_policy.SpecRefused as exc:
        raise HTTPException(422, [{"loc": list(exc.loc), "msg": exc.msg, "type": "value_error"}]) from None
    try:
        quota_gate.admit(session, settings, who.user_id)  # her row locked until the job's commit
    except quota_gate.OverQuota as exc:
        raise HTTPException(
            status.HTTP_429_TOO_MANY_REQUESTS,
            [{"loc": ["body"], "msg": str(exc), "type": "quota_exceeded"}],
            headers={"Retry-After": "60"},
        ) from None

    def log(made: Job) -> None:
        audit.record(session, who, "sweep.extend", f"sweep {sweep_id}", f"job {made.id} resumes job {job.id}")
        audit.record(session, who, "job.submit", f"job {made.id}", f"extends the best trial of sweep {sweep_id}")

    made = jobs.create(
        session,
        checked.name,
        checked.model_dump(mode="json"),
        checked.pool or settings.queue,
        owner_id=who.user_id,
        before_commit=log,
    )
    return JobPublic.from_row(made, {who.user_id: who.name})
