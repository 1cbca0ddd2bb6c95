"""Job specs the tests submit, waiting for a job, and reading what a job left behind.

- `DIGITS_SPEC`: a valid JobSpec body (the MLP on digits, DDP on 2 ranks).
- `fake_spec()`: a job for the stand-in trainer (fake_trainer.py; its behaviour in params).
- `slow_spec()`: the real trainer on tiny data, slowed by user code (slow_model.py), for the fault tests.
- `wait_step_written()`: wait on the trainer's own record of a step (events.jsonl), not the API's lagging copy.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.deadlines import deadline_in

TERMINAL = {"succeeded", "failed", "cancelled"}
USER_CODE = "tests.support.slow_model"  # RANKZERO_ALLOWED_CODE of the fault tests' API

DIGITS_SPEC: dict[str, Any] = {
    "name": "digits-ddp",
    "nproc": 2,
    "max_steps": 20,
    "data": {"name": "digits"},
    "model": {"name": "mlp"},
}


def fake_spec(name: str = "fake", *, behaviour: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
    """A job for the stand-in trainer; `behaviour` (step_s, fail_rank, hang_rank, pid_dir...: see fake_trainer.py)
    travels in params, since the built-in mlp it names takes only its own args."""
    spec = {
        "name": name,
        "model": {"name": "mlp"},
        "params": {"step_s": 0.02, **(behaviour or {})},
        "data": {"name": "digits"},
        "batch_size": 8,
        "max_steps": 20,
        "device": "cpu",
        "checkpoint": {"every_steps": 5, "every_epochs": None},
    }
    spec.update(kw)
    return spec


def slow_spec(name: str, *, step_s: float = 0.1, max_steps: int = 40, every: int = 10, **kw: Any) -> dict[str, Any]:
    """The MLP on digits, `step_s` seconds per micro-batch, a loss point every step, a checkpoint every
    `every` steps."""
    spec: dict[str, Any] = {
        "name": name,
        "model": {"name": f"{USER_CODE}:slow_mlp", "args": {"step_s": step_s, "hidden": 32}},
        "data": {"name": "digits"},
        "batch_size": 16, "nproc": 2, "device": "cpu", "max_steps": max_steps, "log_every": 1, "eval_every": 1000,
        "checkpoint": {"every_steps": every, "every_epochs": None, "keep_last": 3},
    }  # fmt: skip
    spec.update(kw)
    return spec


def seconds(name: str, default: float) -> float:
    """A duration a test may be told to stretch, e.g. RANKZERO_REL_REDIS_OUTAGE_S=60 for the full minute."""
    raw = os.environ.get(name)
    return float(raw) if raw else default


def wait(cond: Callable[[], Any], timeout: float, what: str, every: float = 0.1) -> Any:
    """Poll `cond` until it returns something truthy (and return that), or fail after `timeout` s."""
    deadline = deadline_in(timeout)
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(every)


def points(client: Any, job_id: int, name: str = "train/loss") -> list[int]:
    """Steps of a job's series as the API serves them (no downsampling at this size)."""
    body = client.http.get(f"/jobs/{job_id}/metrics", params={"name": name, "max_points": 100000}).json()
    return [p["step"] for p in body["series"][0]["points"]] if body["series"] else []


def run_dir(settings: Any, job_id: int) -> Path:
    return Path(settings.resolved_runs_dir) / f"job_{job_id}"


def events(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "events.jsonl").read_text().splitlines()
    return [json.loads(x) for x in lines if x.strip()]


def steps_written(run_dir: Path, type_: str | None = None) -> int:
    """The highest `step` rank 0 has written to events.jsonl (of events of type `type_`, or of any), 0 when
    none yet: the trainer's own record, ahead of the API's `step`, which follows it only as often as the
    worker ingests the file (about once a second, later on a loaded machine). Whole lines only: a line
    still being written is left for the next look."""
    try:
        text = (run_dir / "events.jsonl").read_text()
    except FileNotFoundError:
        return 0
    best = 0
    for line in text.split("\n")[:-1]:  # what follows the last newline is not a whole line yet
        try:
            event = json.loads(line)
        except ValueError:
            continue
        step = event.get("step") if isinstance(event, dict) else None
        if isinstance(step, int) and not isinstance(step, bool) and type_ in (None, event.get("type")):
            best = max(best, step)
    return best


def wait_step_written(run_dir: Path, n: int, timeout: float, type_: str | None = None) -> int:
    """Wait until the trainer has written step `n` or later (an event of type `type_` at that step, e.g.
    "checkpoint"; any event when None) and return the step seen. For tests that act mid-run (kill a host,
    drain, stop a rank): the API's `step` lags the trainer by the ingest gap, so a fast job may be over
    before the API shows step `n`."""
    what = f"{type_ or 'step'} {n} in {run_dir}/events.jsonl"
    return wait(lambda: (s := steps_written(run_dir, type_)) >= n and s, timeout, what, every=0.05)


def reference_weights(spec: dict[str, Any], tmp: Path) -> dict[str, Any]:
    """The final model weights of an uninterrupted run of `spec`, trained in this process as one rank
    with nproc × accumulation_steps micro-batches (the same samples per step: DESIGN's layout promise)."""
    import torch

    from trainer.spec import JobSpec
    from trainer.train import train

    ref = json.loads(json.dumps(spec))
    ref["accumulation_steps"] = spec.get("accumulation_steps", 1) * spec["nproc"]
    ref["nproc"] = 1
    ref["model"]["args"]["step_s"] = 0.0
    assert train(JobSpec.model_validate(ref), tmp) == 0
    final = tmp / "checkpoints" / f"step_{spec['max_steps']:08d}.pt"
    return torch.load(final, map_location="cpu", weights_only=True)["model"]


def assert_same_weights(final_ckpt: Path, reference: dict[str, Any]) -> None:
    import torch

    got = torch.load(final_ckpt, map_location="cpu", weights_only=True)["model"]
    assert got.keys() == reference.keys()
    for key, value in reference.items():
        # DDP on 2 ranks vs accumulation in 1: the same sums in another order, so float rounding only.
        assert torch.allclose(got[key], value, rtol=1e-5, atol=1e-6), f"{key} differs from the uninterrupted run"
