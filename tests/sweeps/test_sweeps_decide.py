"""The sweep's decisions as tables: the space and its validation, sampling reproducibility, parallel slots, the
end, and ASHA's pruning rule (promoted only within the best 1/reduction_factor of a rung)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from pydantic import ValidationError

from core.sweeps.decide import TrialView, decide, filled_rungs, judge
from core.sweeps.space import SweepSpec, grid_points, set_path, trial_spec
from trainer.spec import JobSpec

JOB = {"max_steps": 10, "data": {"name": "digits"}}


def sweep(**kw: Any) -> SweepSpec:
    body = {"job": JOB, "parameters": {"optimizer.lr": {"log_uniform": [0.001, 1.0]}}, **kw}
    return SweepSpec.model_validate(body)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"parameters": {"optimizer.lr": {"uniform": [0.01, 20]}}},
            "optimizer.lr: Input should be less than or equal to 10",
        ),
        ({"parameters": {"optimizer.lr": {"uniform": [0.5, 0.1]}}}, "low (0.5) must be below high (0.1)"),
        ({"parameters": {"optimizer.lr": {"log_uniform": [0, 1]}}}, "log_uniform: low must be above 0"),
        ({"parameters": {"optimizer.lr": {"choice": [0.1], "uniform": [0.1, 0.2]}}}, "exactly one of"),
        ({"parameters": {"optimizer.lr": {"uniform": [0.1, 0.2]}}, "method": "grid"}, "choice parameters only"),
        ({"parameters": {"optimiser.lr": {"choice": [0.1]}}}, "optimiser"),
        ({"parameters": {"name": {"choice": ["a"]}}}, "not swept"),
        ({"parameters": {"optimizer.lr": {"choice": [0.1, 0.1]}}}, "a value twice"),
        (
            {
                "parameters": {"batch_size": {"int": [1, 9]}},
                "early_stopping": {"method": "hyperband"},
                "job": {"epochs": 1},
            },
            "hyperband needs",
        ),
    ],
)
def test_a_bad_sweep_is_refused_naming_what_to_fix(body: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        SweepSpec.model_validate({"job": JOB, **body})
    assert message in str(caught.value)


def test_a_trial_is_the_base_spec_with_its_values_and_shows_them_as_params() -> None:
    s = sweep(parameters={"optimizer.lr": {"choice": [0.01, 0.1]}, "batch_size": {"choice": [8, 16]}}, method="grid")
    assert grid_points(s) == [
        {"optimizer.lr": 0.01, "batch_size": 8},
        {"optimizer.lr": 0.01, "batch_size": 16},
        {"optimizer.lr": 0.1, "batch_size": 8},
        {"optimizer.lr": 0.1, "batch_size": 16},
    ]
    spec = trial_spec(s, {"optimizer.lr": 0.1, "batch_size": 8}, 3)
    assert spec["name"] == "sweep-t3" and spec["optimizer"]["lr"] == 0.1 and spec["batch_size"] == 8
    assert spec["params"] == {"optimizer.lr": 0.1, "batch_size": 8}
    alone = JobSpec.model_validate(
        {
            **JOB,
            "name": "sweep-t3",
            "optimizer": {"lr": 0.1},
            "batch_size": 8,
            "params": {"optimizer.lr": 0.1, "batch_size": 8},
        }
    ).model_dump(mode="json")
    assert spec == alone


def test_set_path_sets_sections_and_params_entries() -> None:
    assert set_path({"optimizer": {"name": "sgd"}}, "optimizer.lr", 0.1) == {"optimizer": {"name": "sgd", "lr": 0.1}}
    assert set_path({}, "params.model.width", 3) == {"params": {"model.width": 3}}
    assert set_path({"epochs": 1}, "epochs", 3) == {"epochs": 3}


@pytest.mark.parametrize("method", ["random", "bayesian"])
def test_the_same_rows_give_the_same_trial(method: str) -> None:
    s = sweep(method=method, trials=6, parallel=3, seed=7)
    first = decide(s, "running", [])
    assert [t.number for t in first.new] == [0, 1, 2]
    assert first == decide(s, "running", [])
    assert len({t.values["optimizer.lr"] for t in first.new}) == 3  # each trial its own seed: no repeats
    assert all(0.001 <= t.values["optimizer.lr"] <= 1.0 for t in first.new)
    other = decide(sweep(method=method, trials=6, parallel=3, seed=8), "running", [])
    assert other.new != first.new


def view(number: int, state: str = "live", series: dict[int, float] | None = None, **kw: Any) -> TrialView:
    return TrialView(number, 100 + number, {"optimizer.lr": 0.01 * (number + 1)}, state, series=series or {}, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("status", "trials", "new", "finished"),
    [
        ("running", [], [0, 1], False),
        ("running", [view(0)], [1], False),
        ("running", [view(0), view(1)], [], False),
        ("running", [view(0), view(1, pruned=True)], [2], False),  # a pruned trial's slot goes to the next
        ("running", [view(0, "succeeded"), view(1, "failed")], [2, 3], False),
        ("paused", [view(0, "succeeded")], [], False),
        ("running", [view(n, "succeeded", {1: 1.0}) for n in range(3)] + [view(3)], [], False),
        ("running", [view(n, "succeeded", {1: 1.0}) for n in range(4)], [], True),
        ("cancelled", [], [], False),
    ],
)
def test_slots_and_the_end(status: str, trials: list[TrialView], new: list[int], finished: bool) -> None:
    s = sweep(method="random", trials=4, parallel=2)
    d = decide(s, status, trials)
    assert [t.number for t in d.new] == new
    assert (d.finished is not None) == finished


def test_the_summary_names_the_best_trial() -> None:
    s = sweep(method="random", trials=2, parallel=2, goal="maximize")
    d = decide(s, "running", [view(0, "succeeded", {5: 0.7}), view(1, "succeeded", {5: 0.9})])
    assert d.finished is not None and "best: trial 1 (job 101)" in d.finished


def asha(**kw: Any) -> SweepSpec:
    return sweep(method="random", trials=64, parallel=64, early_stopping={"method": "asha", "min_steps": 10, **kw})


def test_a_trial_before_the_first_rung_is_never_pruned() -> None:
    s = asha()
    trials = [view(0, "succeeded", {10: 0.1, 20: 0.05}), view(1, series={9: 50.0})]
    assert judge(s, trials) == ([], {})


def test_rungs_a_short_trial_passed_unjudged_are_filled_as_asha_records_them() -> None:
    s = asha(reduction_factor=2)
    assert filled_rungs(s, view(0, "succeeded", {5: 3.0, 12: 2.0, 19: 1.5, 40: 1.0})) == {
        "completed_rung_0": 2.0,
        "completed_rung_1": 1.0,
        "completed_rung_2": 1.0,  # steps 10, 20, 40
    }


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("factor", [2, 3])
def test_asha_keeps_only_the_best_share_of_each_rung(seed: int, factor: int) -> None:
    """Trials reach the first rung one by one; each is judged against the values recorded at that rung
    before it. It is kept exactly when it is within the best ⌊n/η⌋ (at least 1) of the n values there, so of
    the trials reaching a rung after the first, at least (1 − 1/η) of them, minus the first few, are pruned."""
    s = asha(reduction_factor=factor)
    rng = random.Random(seed)
    done: list[TrialView] = []
    pruned = 0
    for n in range(12):
        value = rng.random()
        prunes, kept = judge(s, [*done, view(n, series={10: value})])
        at_rung = sorted([t.rungs["completed_rung_0"] for t in done] + [value])
        keep_within = max(1, len(at_rung) // factor)
        assert (not prunes) == (value <= at_rung[keep_within - 1]), (n, value, at_rung)
        if prunes:
            pruned += 1
            rungs = prunes[0].rungs
        else:
            rungs = kept[n]
        done.append(view(n, "succeeded" if not prunes else "cancelled", {10: value}, pruned=bool(prunes), rungs=rungs))
    assert 0 < pruned < 12  # the first trial is always kept (nothing to compare with); random values lose some


def test_asha_prunes_at_least_half_when_each_trial_is_worse_than_the_last() -> None:
    """The case the live test builds (good learning rates first): every later trial is behind, so with η = 2
    all but the first are stopped at the first rung."""
    s = asha(reduction_factor=2)
    done: list[TrialView] = []
    for n in range(8):
        prunes, kept = judge(s, [*done, view(n, series={10: 1.0 + n})])
        assert bool(prunes) == (n > 0)
        done.append(
            view(
                n,
                "cancelled" if prunes else "succeeded",
                {10: 1.0 + n},
                pruned=bool(prunes),
                rungs=prunes[0].rungs if prunes else kept[n],
            )
        )
    assert sum(t.pruned for t in done) >= len(done) // 2


def test_hyperband_judges_from_the_rebuilt_study_and_keeps_its_records() -> None:
    s = sweep(
        method="random", trials=8, parallel=8, early_stopping={"method": "hyperband", "min_steps": 2, "max_steps": 16}
    )
    trials = [view(n, series={2: 1.0 + n, 4: 0.9 + n, 8: 0.8 + n}) for n in range(8)]
    prunes, kept = judge(s, trials)
    assert prunes, "some of eight trials, each worse than the last, are stopped"
    assert all(p.number > 0 for p in prunes)  # the best is never stopped
    assert judge(s, trials) == (prunes, kept)  # the same rows, the same judgement
