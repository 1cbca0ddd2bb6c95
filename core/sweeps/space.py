"""The sweep spec and the one rule that turns a trial's values into a job spec.

A sweep names a base job spec, a parameter space over its fields (dotted paths: `optimizer.lr`,
`batch_size`, or `params.NAME` for a script job's `params` block), a method (grid, random, bayesian), a
metric with its goal, how many trials and how many at once, and optional early stopping. Every trial
is the base spec with its values set, plus the values as `params` (so they show as their own fields):
exactly the job a user would get by submitting that spec alone.
"""

from __future__ import annotations

import itertools
import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from trainer.spec import NAME_PATTERN, PARAM_NAME, JobSpec

MAX_PARAMETERS = 16
MAX_CHOICES = 64
MAX_TRIALS = 1000
MAX_PARALLEL = 64
MAX_GRID = 1000

Scalar = Annotated[str, Field(max_length=200)] | bool | int | float


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, populate_by_name=True)


KINDS = {"choice": "choice", "uniform": "uniform", "log_uniform": "log_uniform", "int": "integer"}  # name → field


class Parameter(_Strict):
    """One dimension of the space: exactly one of choice, uniform, log_uniform, int."""

    choice: list[Scalar] | None = Field(None, min_length=1, max_length=MAX_CHOICES, description="Values to try.")
    uniform: tuple[float, float] | None = Field(None, description="[low, high]: a float drawn uniformly.")
    log_uniform: tuple[float, float] | None = Field(
        None, description="[low, high], both > 0: a float drawn uniformly in log space (learning rates)."
    )
    integer: tuple[int, int] | None = Field(
        None, alias="int", description="[low, high]: an integer, both ends included."
    )

    @model_validator(mode="after")
    def _one_kind(self) -> Parameter:
        given = [k for k in KINDS if getattr(self, KINDS[k]) is not None]
        if len(given) != 1:
            raise ValueError(
                f"give exactly one of choice, uniform, log_uniform, int (got {', '.join(given) or 'none'})"
            )
        bounds = self.uniform or self.log_uniform or self.integer
        if bounds is not None and not bounds[0] < bounds[1]:
            raise ValueError(f"{given[0]}: low ({bounds[0]}) must be below high ({bounds[1]})")
        if self.log_uniform is not None and self.log_uniform[0] <= 0:
            raise ValueError("log_uniform: low must be above 0")
        if self.choice is not None and len({repr(v) for v in self.choice}) != len(self.choice):
            raise ValueError("choice lists a value twice")
        return self

    @property
    def kind(self) -> str:
        return next(k for k in KINDS if getattr(self, KINDS[k]) is not None)

    def corners(self) -> list[Scalar]:
        """The values that bound this dimension (every choice; both ends of a range): what to validate."""
        if self.choice is not None:
            return list(self.choice)
        bounds = self.uniform or self.log_uniform or self.integer
        assert bounds is not None
        return [bounds[0], bounds[1]]


class EarlyStopping(_Strict):
    """Optuna's pruners on the reported metric: ASHA (successive halving) or Hyperband."""

    method: Literal["asha", "hyperband"] = Field("asha", description="asha, or hyperband (several ASHA brackets).")
    min_steps: int = Field(
        10, ge=1, le=10_000_000, description="Steps a trial runs before it can be stopped (the first rung)."
    )
    reduction_factor: int = Field(2, ge=2, le=10, description="Keep the best 1/reduction_factor at each rung.")
    max_steps: int | None = Field(
        None, ge=2, le=1_000_000_000, description="Hyperband: a trial's full length in steps (default: max_steps)."
    )


class SweepSpec(_Strict):
    """A hyperparameter search (POST /api/sweeps, `rankzero sweep FILE`)."""

    name: str = Field("sweep", pattern=NAME_PATTERN, description="The sweep's name; trials are NAME-t<number>.")
    job: dict[str, Any] = Field(description="The base job spec every trial starts from (see `rankzero schema`).")
    parameters: dict[str, Parameter] = Field(
        min_length=1,
        max_length=MAX_PARAMETERS,
        description="Spec fields to vary, by dotted path ('optimizer.lr', 'batch_size', 'params.lr').",
    )
    method: Literal["grid", "random", "bayesian"] = Field(
        "random", description="grid (every combination of choices), random, or bayesian (Optuna's TPE)."
    )
    metric: str = Field(
        "val/loss", min_length=1, max_length=200, description="The reported metric the sweep judges by."
    )
    goal: Literal["minimize", "maximize"] = Field("minimize")
    trials: int = Field(8, ge=1, le=MAX_TRIALS, description="How many trials at most (a grid: its size at most).")
    parallel: int = Field(2, ge=1, le=MAX_PARALLEL, description="How many trials are queued or running at once.")
    seed: int = Field(0, ge=0, le=2**31 - 1, description="Seed of the sampler: the same rows give the same choices.")
    early_stopping: EarlyStopping | None = Field(None, description="Stop trials that fall behind (null: never).")

    @field_validator("parameters")
    @classmethod
    def _paths(cls, v: dict[str, Parameter]) -> dict[str, Parameter]:
        for path in v:
            if not PARAM_NAME.match(path) or path.startswith("params.") and len(path) == len("params."):
                raise ValueError(f"parameter {path[:80]!r}: a dotted spec path such as 'optimizer.lr' or 'params.lr'")
            if path.split(".")[0] in ("name", "params", "resume_from", "code", "entrypoint") and not path.startswith(
                "params."
            ):
                raise ValueError(f"parameter {path!r}: that field is not swept (use 'params.NAME' for a script)")
        return v

    @model_validator(mode="after")
    def _check(self) -> SweepSpec:
        if self.method == "grid":
            not_choice = [p for p, d in self.parameters.items() if d.choice is None]
            if not_choice:
                raise ValueError(f"a grid sweep takes choice parameters only; {not_choice[0]!r} is a range")
            if grid_size(self) > MAX_GRID:
                raise ValueError(f"the grid has {grid_size(self)} points; the limit is {MAX_GRID}")
        stop = self.early_stopping
        needs_length = stop is not None and stop.method == "hyperband" and stop.max_steps is None
        if needs_length and not isinstance(self.job.get("max_steps"), int):
            raise ValueError("hyperband needs early_stopping.max_steps (or max_steps in the job)")
        for values in _probe_points(self):
            trial_spec(self, values, 0)  # every choice and both ends of every range make a valid job
        return self


def grid_size(sweep: SweepSpec) -> int:
    return math.prod(len(p.choice or ()) for p in sweep.parameters.values())


def grid_points(sweep: SweepSpec) -> list[dict[str, Scalar]]:
    """Every combination of the choices, in the order the parameters and their values were given."""
    names = list(sweep.parameters)
    return [
        dict(zip(names, combo, strict=True))
        for combo in itertools.product(*(sweep.parameters[n].choice or () for n in names))
    ]


def total_trials(sweep: SweepSpec) -> int:
    return min(sweep.trials, grid_size(sweep)) if sweep.method == "grid" else sweep.trials


def _probe_points(sweep: SweepSpec) -> list[dict[str, Scalar]]:
    """One trial per corner value of each dimension (the others at their first corner): what a bad
    bound or choice would break, without building the whole grid."""
    first = {n: p.corners()[0] for n, p in sweep.parameters.items()}
    points = [first]
    for name, param in sweep.parameters.items():
        points += [{**first, name: v} for v in param.corners()[1:]]
    return points


def set_path(spec: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of `spec` with the dotted `path` set to `value` (sections made as needed); `params.NAME` sets
    one entry of the params block, whose names may hold dots themselves."""
    out = dict(spec)
    if path.startswith("params."):
        out["params"] = {**(out.get("params") or {}), path[len("params.") :]: value}
        return out
    head, _, rest = path.partition(".")
    if not rest:
        out[head] = value
        return out
    inner = out.get(head)
    out[head] = set_path(inner if isinstance(inner, dict) else {}, rest, value)
    return out


def trial_spec(sweep: SweepSpec, values: dict[str, Any], number: int) -> dict[str, Any]:
    """The job spec of trial `number` with `values`, validated (a ValueError names the field), as JSON."""
    spec = dict(sweep.job)
    for path, value in values.items():
        spec = set_path(spec, path, value)
    labels = {path.removeprefix("params."): value for path, value in values.items()}
    spec["params"] = {**(spec.get("params") or {}), **labels}
    spec["name"] = f"{sweep.name[:90]}-t{number}"
    try:
        return JobSpec.model_validate(spec).model_dump(mode="json")
    except ValidationError as exc:
        where = ", ".join(f"{k}={v!r}" for k, v in values.items())
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"]) or "job"
        raise ValueError(f"the trial with {where} is not a valid job: {loc}: {first['msg']}") from None
