"""The trainer tests' launches: real processes (bounded), their events and weights.

Children run with the repository and tests/trainer (probe.py, rz_user_code.py) on PYTHONPATH.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

from tests.support.commands import ROOT
from tests.support.deadlines import deadline_in

REPO = ROOT
TRAINER_TESTS = ROOT / "tests" / "trainer"
PYTHON = sys.executable
LAUNCH_TIMEOUT_S = 150

BASE_SPEC: dict[str, Any] = {
    "name": "t",
    "model": {"name": "mlp", "args": {"in_features": 16, "hidden": 32, "num_classes": 4}},
    "data": {
        "name": "synthetic",
        "args": {"num_samples": 200, "num_features": 16, "num_classes": 4},
        "val_fraction": 0.2,
    },
    "optimizer": {"name": "sgd", "lr": 0.1, "momentum": 0.9},
    "batch_size": 8,
    "max_steps": 15,
    "log_every": 1,
    "eval_every": 5,
    "device": "cpu",
    "checkpoint": {"every_steps": 5, "every_epochs": None, "keep_last": 10},
}


def make_spec(**overrides: Any) -> dict[str, Any]:
    """BASE_SPEC with top-level keys replaced (nested dicts merged one level deep)."""
    spec = copy.deepcopy(BASE_SPEC)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(spec.get(key), dict):
            spec[key] = {**spec[key], **value}
        else:
            spec[key] = value
    return spec


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        PYTHONPATH=os.pathsep.join([str(REPO), str(TRAINER_TESTS)]),
        PYTHONUNBUFFERED="1",
    )
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    env.update(extra)
    return env


def torchrun_cmd(nproc: int, *args: str, log_dir: Path | None = None) -> list[str]:
    cmd = [PYTHON, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    if log_dir is not None:
        cmd.append(f"--log-dir={log_dir}")
    return cmd + list(args)


def run(cmd: list[str], timeout: float = LAUNCH_TIMEOUT_S, **env: str) -> subprocess.CompletedProcess:
    """Run in a new session and kill that whole session if it overruns (only what this test started)."""
    proc = subprocess.Popen(
        cmd,
        cwd=REPO,
        env=child_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"{cmd} ran past {timeout}s:\n{out[-4000:]}") from None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, "")


def write_spec(path: Path, spec: dict[str, Any]) -> Path:
    path.write_text(json.dumps(spec))
    return path


def trainer_cmd(spec_path: Path, run_dir: Path, nproc: int = 1, log_dir: Path | None = None) -> list[str]:
    args = ["-m", "trainer", "--spec", str(spec_path), "--run-dir", str(run_dir)]
    return torchrun_cmd(nproc, *args, log_dir=log_dir) if nproc > 1 else [PYTHON, *args]


def run_probe(jobs: list[dict[str, Any]], workdir: Path, nproc: int = 1, **env: str) -> list[dict[str, Any]]:
    """Run jobs [{"spec", "run_dir"}] in one (torchrun) launch of probe.py; returns its result rows."""
    jobs_path, result_path = workdir / f"jobs_{nproc}.json", workdir / f"result_{nproc}.json"
    jobs_path.write_text(json.dumps(jobs))
    probe = str(TRAINER_TESTS / "probe.py")
    cmd = (
        torchrun_cmd(nproc, probe, str(jobs_path), str(result_path))
        if nproc > 1
        else [PYTHON, probe, str(jobs_path), str(result_path)]
    )
    done = run(cmd, **env)
    assert done.returncode == 0, done.stdout[-6000:]
    return json.loads(result_path.read_text())


def read_events(run_dir: Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def metric_series(events: list[dict[str, Any]], name: str) -> dict[int, float]:
    return {e["step"]: e["value"] for e in events if e["type"] == "metric" and e["name"] == name}


def wait_for_event(
    run_dir: Path, predicate, timeout: float = 90.0, proc: subprocess.Popen | None = None
) -> dict[str, Any]:
    deadline = deadline_in(timeout)
    while time.monotonic() < deadline:
        for e in read_events(run_dir):
            if predicate(e):
                return e
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"process exited with {proc.returncode} before the awaited event")
        time.sleep(0.1)
    raise AssertionError(f"no matching event in {run_dir} within {timeout}s")


def load_checkpoint(path: Path) -> dict[str, Any]:
    return torch.load(path, map_location="cpu", weights_only=True)


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    ckpts = sorted((Path(run_dir) / "checkpoints").glob("step_*.pt"))
    assert ckpts, f"no checkpoint in {run_dir}"
    return load_checkpoint(ckpts[-1])["model"]


def relative_error(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    va = torch.cat([a[k].double().reshape(-1) for k in a])
    vb = torch.cat([b[k].double().reshape(-1) for k in a])
    return ((va - vb).norm() / vb.norm()).item()
