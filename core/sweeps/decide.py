"""What a sweep does now: a pure function of what its rows say (no database, no clock).

Optuna decides, but our tables are the truth: for every decision an in-memory Optuna study is rebuilt
from the trials as stored (`create_trial` per trial, then `add_trial`), and asked. Nothing of Optuna's
is stored but the pruner's rung records, kept on each trial so the rebuilt study judges as the last one
did. The sampler's seed is the sweep's seed and the trial's number, so the same rows give the same new
trial every time (a restarted driver makes the trial the dead one would have made).

    grid       every combination of the choices, in order (trial n is combination n)
    random     Optuna's RandomSampler
    bayesian   Optuna's TPESampler (constant liar: running trials count, so parallel trials differ)
    early stopping: Optuna's SuccessiveHalvingPruner (ASHA) or HyperbandPruner on the metric's series
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from core.sweeps.space import Parameter, SweepSpec, grid_points, total_trials

# What a trial's job is, as far as the sweep cares.
TrialState = Literal["live", "succeeded", "failed", "cancelled"]
RUNG_PREFIX = "completed_rung_"


@dataclass(frozen=True)
class TrialView:
    number: int
    job_id: int
    params: Mapping[str, Any]
    state: TrialState
    pruned: bool = False
    series: Mapping[int, float] = field(default_factory=dict)  # the metric by step, as reported
    rungs: Mapping[str, float] = field(default_factory=dict)  # the pruner's records (completed_rung_N → value)

    @property
    def final(self) -> float | None:
        """The metric at its last reported step (a sweep's objective), None when it reported none."""
        return self.series[max(self.series)] if self.series else None

    @property
    def holds_slot(self) -> bool:
        """Counts against `parallel`: a pruned trial's slot goes to the next trial while it checkpoints."""
        return self.state == "live" and not self.pruned


@dataclass(frozen=True)
class NewTrial:
    number: int
    values: dict[str, Any]


@dataclass(frozen=True)
class Prune:
    number: int
    job_id: int
    step: int
    value: float
    rungs: dict[str, float]


@dataclass(frozen=True)
class Decision:
    new: list[NewTrial] = field(default_factory=list)
    prune: list[Prune] = field(default_factory=list)
    rungs: dict[int, dict[str, float]] = field(default_factory=dict)  # trials judged and kept: their new records
    finished: str | None = None  # the sweep is over: why


def _seed(sweep: SweepSpec, number: int) -> int:
    return (sweep.seed * 1_000_003 + number) % (2**32)


def distributions(sweep: SweepSpec) -> dict[str, Any]:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    def one(p: Parameter) -> Any:
        if p.choice is not None:
            return CategoricalDistribution(p.choice)
        if p.uniform is not None:
            return FloatDistribution(p.uniform[0], p.uniform[1])
        if p.log_uniform is not None:
            return FloatDistribution(p.log_uniform[0], p.log_uniform[1], log=True)
        assert p.integer is not None
        return IntDistribution(p.integer[0], p.integer[1])

    return {name: one(p) for name, p in sweep.parameters.items()}


def _pruner(sweep: SweepSpec) -> Any:
    import optuna

    stop = sweep.early_stopping
    if stop is None:
        return optuna.pruners.NopPruner()
    if stop.method == "hyperband":
        most = stop.max_steps or int(sweep.job["max_steps"])
        return optuna.pruners.HyperbandPruner(
            min_resource=stop.min_steps, max_resource=most, reduction_factor=stop.reduction_factor
        )
    return optuna.pruners.SuccessiveHalvingPruner(
        min_resource=stop.min_steps, reduction_factor=stop.reduction_factor, min_early_stopping_rate=0
    )


def _sampler(sweep: SweepSpec, number: int) -> Any:
    import optuna

    if sweep.method == "bayesian":
        return optuna.samplers.TPESampler(seed=_seed(sweep, number), constant_liar=True)
    return optuna.samplers.RandomSampler(seed=_seed(sweep, number))


def _frozen(sweep: SweepSpec, t: TrialView, dists: dict[str, Any]) -> Any:
    """One stored trial as Optuna sees it: COMPLETE with its final value, PRUNED, FAIL, or RUNNING."""
    import optuna
    from optuna.trial import TrialState as S

    params = {k: v for k, v in t.params.items() if k in dists and dists[k]._contains(dists[k].to_internal_repr(v))}
    if t.pruned:
        state, value = S.PRUNED, None
    elif t.state == "live":
        state, value = S.RUNNING, None
    elif t.state == "succeeded" and t.final is not None:
        state, value = S.COMPLETE, t.final
    else:
        state, value = S.FAIL, None
    return optuna.trial.create_trial(
        state=state,
        value=value,
        params=params,
        distributions={k: dists[k] for k in params},
        intermediate_values=dict(t.series),
        system_attrs=dict(t.rungs),
    )


def study(sweep: SweepSpec, trials: Sequence[TrialView], number: int, name: str = "sweep") -> Any:
    """An in-memory study holding `trials` in number order, sampling with trial `number`'s seed."""
    import optuna

    optuna.logging.set_verbosity(logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)  # constant_liar
    direction = "minimize" if sweep.goal == "minimize" else "maximize"
    made = optuna.create_study(
        study_name=name, direction=direction, sampler=_sampler(sweep, number), pruner=_pruner(sweep)
    )
    dists = distributions(sweep)
    for t in sorted(trials, key=lambda t: t.number):
        made.add_trial(_frozen(sweep, t, dists))
    return made


def rung_steps(sweep: SweepSpec, last_step: int) -> list[int]:
    """ASHA's rung steps up to `last_step`: min_steps × reduction_factor^r."""
    stop = sweep.early_stopping
    if stop is None or stop.method != "asha":
        return []
    steps, step = [], stop.min_steps
    while step <= last_step:
        steps.append(step)
        step *= stop.reduction_factor
    return steps


def filled_rungs(sweep: SweepSpec, t: TrialView) -> dict[str, float]:
    """A trial's rung records, with the rungs it passed while no pass judged it (a short trial can start and
    end between two passes) filled in as ASHA would have recorded them had it been judged at each report:
    the value at the first reported step at or past the rung."""
    records = dict(t.rungs)
    if not t.series:
        return records
    steps = sorted(t.series)
    for r, rung in enumerate(rung_steps(sweep, steps[-1])):
        key = f"{RUNG_PREFIX}{r}"
        if key not in records:
            at = next(s for s in steps if s >= rung)
            records[key] = float(t.series[at])
    return records


def judge(
    sweep: SweepSpec, trials: Sequence[TrialView], name: str = "sweep"
) -> tuple[list[Prune], dict[int, dict[str, float]]]:
    """The live trials the pruner stops now, and the rung records of those it keeps (changed ones only)."""
    if sweep.early_stopping is None:
        return [], {}
    ordered = sorted(trials, key=lambda t: t.number)
    candidates = [t for t in ordered if t.holds_slot and t.series]
    if not candidates:
        return [], {}
    judged = {t.number for t in candidates}
    ordered = [t if t.number in judged else _with_rungs(t, filled_rungs(sweep, t)) for t in ordered]
    rebuilt = study(sweep, ordered, len(ordered), name)
    frozen = rebuilt.get_trials(deepcopy=False)
    by_number = {t.number: i for i, t in enumerate(ordered)}
    prunes: list[Prune] = []
    kept: dict[int, dict[str, float]] = {}
    for t in candidates:
        i = by_number[t.number]
        stop = rebuilt.pruner.prune(rebuilt, frozen[i])
        # The pruner records the rungs it judged in the trial's system attrs (its storage): keep them.
        records = {
            k: float(v)
            for k, v in rebuilt.get_trials(deepcopy=False)[i].system_attrs.items()
            if k.startswith(RUNG_PREFIX)
        }
        frozen = rebuilt.get_trials(deepcopy=False)
        step = max(t.series)
        if stop:
            prunes.append(Prune(t.number, t.job_id, step, float(t.series[step]), records))
        elif records != dict(t.rungs):
            kept[t.number] = records
    return prunes, kept


def _with_rungs(t: TrialView, rungs: dict[str, float]) -> TrialView:
    return TrialView(t.number, t.job_id, t.params, t.state, t.pruned, t.series, rungs)


def sample(sweep: SweepSpec, trials: Sequence[TrialView], number: int, name: str = "sweep") -> dict[str, Any]:
    """The values of trial `number`: the grid's next point, or what the sampler asks for."""
    if sweep.method == "grid":
        return grid_points(sweep)[number]
    rebuilt = study(sweep, trials, number, name)
    asked = rebuilt.ask(fixed_distributions=distributions(sweep))
    return dict(asked.params)


def decide(sweep: SweepSpec, status: str, trials: Sequence[TrialView], name: str = "sweep") -> Decision:
    """What to do now: prune (any status but cancelled), start new trials (running only), or end."""
    if status in ("cancelled", "finished"):
        return Decision()
    prunes, kept = judge(sweep, trials, name)
    pruned_now = {p.number for p in prunes}
    after = [
        TrialView(t.number, t.job_id, t.params, t.state, True, t.series, t.rungs) if t.number in pruned_now else t
        for t in trials
    ]
    total = total_trials(sweep)
    if len(after) >= total and not any(t.state == "live" for t in after):
        return Decision(prune=prunes, rungs=kept, finished=_summary(sweep, after))
    new: list[NewTrial] = []
    if status == "running":
        free = sweep.parallel - sum(1 for t in after if t.holds_slot)
        made = list(after)
        for number in range(len(after), min(total, len(after) + max(0, free))):
            values = sample(sweep, made, number, name)
            new.append(NewTrial(number, values))
            made.append(TrialView(number, -1 - number, values, "live"))
    return Decision(new=new, prune=prunes, rungs=kept)


def best(sweep: SweepSpec, trials: Sequence[TrialView]) -> TrialView | None:
    """The trial with the best final metric among those that finished on their own (not pruned)."""
    done = [t for t in trials if t.state == "succeeded" and not t.pruned and t.final is not None]
    if not done:
        return None
    pick = min if sweep.goal == "minimize" else max
    return pick(done, key=lambda t: (t.final or 0.0) * 1.0)


def _summary(sweep: SweepSpec, trials: Sequence[TrialView]) -> str:
    winner = best(sweep, trials)
    pruned = sum(1 for t in trials if t.pruned)
    failed = sum(1 for t in trials if t.state == "failed")
    counts = f"{len(trials)} trials ({pruned} pruned, {failed} failed)"
    if winner is None:
        return f"{counts}; no trial reported {sweep.metric} to the end"
    return f"{counts}; best: trial {winner.number} (job {winner.job_id}), {sweep.metric} {winner.final:.6g}"
