"""REST shapes of sweeps (api/routes/sweeps.py): a sweep, its trials, the best one."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from core.resume import extend_refusal
from core.sweeps.decide import TrialView, best
from core.sweeps.space import SweepSpec, total_trials
from core.tables import Job, JobStatus, Sweep, SweepTrial


class TrialPublic(BaseModel):
    number: int
    job_id: int
    name: str
    status: str = Field(description="The job's status, or 'pruned' for a trial the sweep stopped early.")
    job_status: str
    params: dict[str, Any]
    final: float | None = Field(description="The metric at the trial's last reported step (the objective).")
    best: float | None = Field(description="The metric's best value over the trial's steps.")
    step: int
    pruned_step: int | None
    is_best: bool


class SweepPublic(BaseModel):
    id: int
    name: str
    status: str = Field(description="running, paused, cancelled or finished.")
    method: str
    metric: str
    goal: str
    trials_total: int = Field(description="How many trials the sweep makes at most (a grid: its size at most).")
    parallel: int
    created_at: datetime
    finished_at: datetime | None
    note: str | None
    best_job_id: int | None
    best_value: float | None
    owner_id: int | None = Field(None, description="The user who started it (her trials are her jobs).")
    extend_refusal: str | None = Field(
        None, description="Why its best trial cannot be trained longer (extend-best); null: it can."
    )

    @classmethod
    def of(cls, row: Sweep, views: list[TrialView] | None = None) -> SweepPublic:
        spec = SweepSpec.model_validate(row.spec)
        winner = best(spec, views or [])
        return cls(
            id=int(row.id or 0),
            name=row.name,
            status=row.status,
            method=spec.method,
            metric=spec.metric,
            goal=spec.goal,
            trials_total=total_trials(spec),
            parallel=spec.parallel,
            created_at=row.created_at,
            finished_at=row.finished_at,
            note=row.note,
            best_job_id=winner.job_id if winner else None,
            best_value=winner.final if winner else None,
            owner_id=row.owner_id,
            extend_refusal=extend_refusal(spec.job),
        )


class SweepDetail(SweepPublic):
    spec: dict[str, Any]
    parameters: list[str] = Field(description="The swept parameters, in the order of the spec (the table's columns).")
    trials: list[TrialPublic] = Field(description="Best first (by the final metric); trials without a value last.")

    @classmethod
    def detail(cls, row: Sweep, rows: list[tuple[SweepTrial, Job, TrialView]]) -> SweepDetail:
        spec = SweepSpec.model_validate(row.spec)
        views = [v for _, _, v in rows]
        head = SweepPublic.of(row, views)
        pick = min if spec.goal == "minimize" else max
        trials = []
        for trial, job, view in rows:
            values = list(view.series.values())
            trials.append(
                TrialPublic(
                    number=trial.number,
                    job_id=int(trial.job_id),
                    name=job.name,
                    # a trial whose job finished before the prune's stop reached it completed: it says so
                    status="pruned" if trial.pruned and job.status != JobStatus.succeeded else job.status.value,
                    job_status=job.status.value,
                    params=trial.params,
                    final=view.final,
                    best=pick(values) if values else None,
                    step=job.step,
                    pruned_step=trial.pruned_step,
                    is_best=head.best_job_id == trial.job_id,
                )
            )
        sign = 1.0 if spec.goal == "minimize" else -1.0
        trials.sort(key=lambda t: (t.final is None, sign * (t.final or 0.0), t.number))
        return cls(**head.model_dump(), spec=row.spec, parameters=list(spec.parameters), trials=trials)


class SweepPage(BaseModel):
    sweeps: list[SweepPublic]
