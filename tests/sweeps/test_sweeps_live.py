"""Sweeps through the whole service: REST → the driver in the scheduler → trials as ordinary jobs on a real
Celery worker with the real trainer (tiny digits jobs, a few steps, 2 at a time)."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.support.deadlines import deadline_in
from tests.support.jobs import TERMINAL


def _job(**kw: Any) -> dict[str, Any]:
    spec = {
        "model": {"name": "mlp"},
        "data": {"name": "digits"},
        "batch_size": 16,
        "max_steps": 8,
        "device": "cpu",
        "log_every": 2,
        "eval_every": 4,
        "optimizer": {"name": "sgd", "lr": 0.1},
        "checkpoint": {"every_steps": 4, "every_epochs": None},
    }
    spec.update(kw)
    return spec


def _wait_sweep(client: Any, sweep_id: int, until: Any, timeout: float, what: str) -> dict[str, Any]:
    deadline = deadline_in(timeout)
    while True:
        detail = client.http.get(f"/sweeps/{sweep_id}").json()
        if until(detail):
            return detail
        if time.monotonic() > deadline:
            raise AssertionError(f"sweep {sweep_id} did not reach {what} in {timeout} s: {detail}")
        time.sleep(0.3)


def _live_trials(client: Any, detail: dict[str, Any]) -> int:
    return sum(1 for t in detail["trials"] if t["job_status"] not in TERMINAL)


def _same_weights(settings: Any, a: int, b: int) -> None:
    from tests.support.trainer_runs import final_weights
    from trainer.run_dir import job_run_dir

    wa, wb = (final_weights(job_run_dir(settings.resolved_runs_dir, j)) for j in (a, b))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa), f"jobs {a} and {b} differ"


@pytest.fixture
def sweep_service(service: Any, workers: Any) -> Any:
    settings, client = service(cpu_slots=2, scheduler_poll_s=0.3)
    workers.start(settings, fake=False, pool="threads", concurrency=2)
    return settings, client


# Several short jobs one after another: on a shared, loaded machine past the default 300 s limit.
@pytest.mark.timeout(600)
def test_grid_sweep_runs_every_point_two_at_a_time_best_first(sweep_service: Any) -> None:
    settings, client = sweep_service
    body = {
        "name": "lr-grid",
        "job": _job(),
        "method": "grid",
        "metric": "val/loss",
        "goal": "minimize",
        "parameters": {"optimizer.lr": {"choice": [0.001, 0.03, 0.1, 0.3]}},
        "trials": 10,
        "parallel": 2,
    }
    r = client.http.post("/sweeps", json=body)
    assert r.status_code == 201, r.text
    sweep = r.json()
    assert sweep["trials_total"] == 4  # a grid makes its size at most
    most_live = 0

    def done(detail: dict[str, Any]) -> bool:
        nonlocal most_live
        most_live = max(most_live, _live_trials(client, detail))
        return detail["status"] == "finished"

    detail = _wait_sweep(client, sweep["id"], done, 240, "finished")
    trials = detail["trials"]
    assert len(trials) == 4 and all(t["status"] == "succeeded" for t in trials), trials
    assert most_live <= 2  # parallel: 2
    assert sorted(t["params"]["optimizer.lr"] for t in trials) == [0.001, 0.03, 0.1, 0.3]
    finals = [t["final"] for t in trials]
    assert finals == sorted(finals)  # best first
    assert [t["is_best"] for t in trials] == [True, False, False, False]
    assert detail["best_job_id"] == trials[0]["job_id"]
    job = client.job(trials[0]["job_id"])
    assert job["spec"]["params"] == {"optimizer.lr": trials[0]["params"]["optimizer.lr"]}

    # A trial is exactly the job you would get by submitting its spec alone: the same weights.
    alone = client.submit({**job["spec"], "name": "alone"})
    assert client.wait_terminal(alone["id"], 120)["status"] == "succeeded"
    _same_weights(settings, alone["id"], trials[0]["job_id"])


def test_a_script_sweep_over_lr_through_the_sdk_then_cancelled_mid_run(sweep_service: Any, tmp_path: Path) -> None:
    """The swept value reaches the script's command line (`${params.lr}`) and `rankzero.params()`; a cancel
    stops the running trials and makes no new one."""
    from tests.scripts.conftest import _upload

    _, client = sweep_service
    code = _upload(client, _project(tmp_path))
    job = {
        "code": code,
        "entrypoint": "train.py --lr ${params.lr} --steps 600",
        "device": "cpu",
        "params": {"lr": 0.05},
    }
    body = {
        "name": "script-lr",
        "job": job,
        "method": "random",
        "metric": "score",
        "trials": 6,
        "parallel": 2,
        "parameters": {"params.lr": {"uniform": [0.01, 0.1]}},
    }
    r = client.http.post("/sweeps", json=body)
    assert r.status_code == 201, r.text
    sweep = r.json()

    def reported(detail: dict[str, Any]) -> bool:
        return len(detail["trials"]) == 2 and all(t["final"] is not None for t in detail["trials"])

    detail = _wait_sweep(client, sweep["id"], reported, 120, "two trials reporting")
    for t in detail["trials"]:
        spec = client.job(t["job_id"])["spec"]
        lr = t["params"]["params.lr"]
        assert spec["params"]["lr"] == lr and spec["entrypoint"] == f"train.py --lr {lr!r} --steps 600"
        seen = client.http.get(f"/jobs/{t['job_id']}/metrics", params={"name": "seen/lr"}).json()["series"][0]
        assert seen["points"][-1]["value"] == pytest.approx(lr)

    r = client.http.post(f"/sweeps/{sweep['id']}/cancel")
    assert r.status_code == 202 and r.json()["status"] == "cancelled", r.text
    detail = _wait_sweep(client, sweep["id"], lambda d: _live_trials(client, d) == 0, 120, "no live trial")
    assert detail["status"] == "cancelled" and len(detail["trials"]) == 2, detail
    assert all(t["job_status"] == "cancelled" for t in detail["trials"]), detail["trials"]
    assert client.http.post(f"/sweeps/{sweep['id']}/cancel").status_code == 409


def _project(tmp_path: Path) -> Path:
    import shutil

    target = tmp_path / "lr_script"
    shutil.copytree(Path(__file__).parent / "projects" / "lr_script", target)
    return target


# Several short jobs one after another: on a shared, loaded machine past the default 300 s limit.
@pytest.mark.timeout(600)
def test_asha_prunes_the_laggards_keeps_their_checkpoints_and_survives_a_scheduler_restart(
    sweep_service: Any, workers: Any
) -> None:
    settings, client = sweep_service
    # A good learning rate first, then five useless ones: each useless trial is behind at the first rung
    # (step 8) and is stopped; its slot goes to the next trial.
    body = {
        "name": "asha",
        # 120 steps: a laggard judged at step 8 is stopped long before it could finish on its own
        "job": _job(max_steps=120, log_every=4, eval_every=None, checkpoint={"every_steps": 4, "every_epochs": None}),
        "method": "grid",
        "metric": "train/loss",
        "parallel": 2,
        "trials": 6,
        "parameters": {"optimizer.lr": {"choice": [0.3, 0.0001, 0.0002, 0.0003, 0.0004, 0.0005]}},
        "early_stopping": {"method": "asha", "min_steps": 8, "reduction_factor": 2},
    }
    sweep = client.http.post("/sweeps", json=body).json()
    _wait_sweep(client, sweep["id"], lambda d: len(d["trials"]) >= 3, 180, "a third trial")
    # Restart the worker, whose scheduler drives the sweep: the new one goes on from the rows.
    workers.stop(workers.procs[0], signal.SIGTERM, timeout=60)
    workers.start(settings, fake=False, pool="threads", concurrency=2)
    detail = _wait_sweep(client, sweep["id"], lambda d: d["status"] == "finished", 240, "finished")
    trials = detail["trials"]
    assert len(trials) == 6 and sorted(t["number"] for t in trials) == list(range(6))
    pruned = [t for t in trials if t["status"] == "pruned"]
    # How many laggards are pruned depends on the order they reach step 8: ASHA promotes the first trial at a rung
    # (nothing to compare it with), and the useless trial that starts beside the good one may get there first.
    # Two or more were pruned in every run seen (CI at load: 2); the count is not a guarantee ASHA makes.
    assert len(pruned) >= 2, trials
    for t in pruned:
        assert t["job_status"] == "cancelled" and t["params"]["optimizer.lr"] < 0.01
        assert client.http.get(f"/jobs/{t['job_id']}/checkpoints").json(), f"pruned trial {t} kept no checkpoint"
        timeline = client.http.get(f"/jobs/{t['job_id']}").json()
        assert "pruned by sweep" in str(timeline), timeline
    best = trials[0]
    assert best["is_best"] and best["status"] == "succeeded" and best["params"]["optimizer.lr"] == 0.3
