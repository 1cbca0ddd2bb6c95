"""A job of a Slurm pool that Slurm stops comes back and ends exact, on a real Slurm (tests/slurm/cluster.py):

- near its time limit, Slurm's warning signal (`--signal=USR1@margin`) makes the ranks checkpoint and exit 75, and
  the batch script requeues its own job, which resumes from the checkpoint;
- preempted in a partition whose preempted jobs Slurm cancels (PreemptMode=CANCEL: no requeue by Slurm, and the
  batch script's own requeue refused for a job an admin made not requeueable), its ranks checkpoint within
  GraceTime, and the agent submits it again as a new Slurm job.

The first attempt trains slowly (tests/slurm/first_attempt_slow.py) so that the signal surely finds it training;
the resumed attempt ends in seconds. The weights are compared with the trainer run uninterrupted."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from tests.slurm.cluster import SlurmCluster
from tests.slurm.conftest import run_dir
from tests.slurm.driving import TERMINAL, drive, final_checkpoint, submit, timeline
from tests.support.jobs import assert_same_weights, reference_weights
from worker.slurm.agent import Agent
from worker.slurm.rank import WARNED_LINE

pytestmark = pytest.mark.slow
S_RUNNING = "running"
SLOW_FIRST = "tests.slurm.first_attempt_slow"  # the user code of these jobs


def first_attempt_slow(name: str, max_steps: int = 300, step_s: float = 0.2) -> dict[str, Any]:
    return {
        "name": name,
        "model": {"name": f"{SLOW_FIRST}:slow_first_attempt", "args": {"step_s": step_s, "hidden": 32}},
        "data": {"name": "digits"},
        "batch_size": 16, "nproc": 2, "device": "cpu", "max_steps": max_steps, "log_every": 1, "eval_every": 1000,
        "checkpoint": {"every_steps": 100, "every_epochs": None, "keep_last": 3},
    }  # fmt: skip


def run_seconds(cluster: SlurmCluster, slurm_id: str) -> int:
    """How long the Slurm job has run (scontrol's RunTime=[D-]HH:MM:SS)."""
    found = re.search(r"RunTime=(?:(\d+)-)?(\d+):(\d+):(\d+)", cluster.run("scontrol", "show", "job", slurm_id))
    assert found, f"no RunTime for Slurm job {slurm_id}"
    days, h, m, s = (int(g or 0) for g in found.groups())
    return ((days * 24 + h) * 60 + m) * 60 + s


def events(agent: Agent, job_id: int) -> list[dict[str, Any]]:
    lines = (run_dir(agent.settings, job_id) / "events.jsonl").read_text().splitlines()
    return [json.loads(x) for x in lines]


def assert_resumed_exact(agent: Agent, job_id: int, spec: dict[str, Any], tmp: Path) -> None:
    started = [e for e in events(agent, job_id) if e["type"] == "started"]
    assert len(started) >= 2 and started[-1].get("resumed_from"), started
    assert_same_weights(final_checkpoint(agent, job_id, spec["max_steps"]), reference_weights(spec, tmp))


def test_the_time_limits_warning_checkpoints_requeues_and_the_job_ends_exact(
    agent: Agent, slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    agent.settings = agent.settings.model_copy(update={"slurm_signal_margin_s": 30})
    spec = first_attempt_slow("time-limit", max_steps=500, step_s=0.3)  # 150 s of training: warned before its end
    job_id = submit(agent, spec)
    job = drive(agent, job_id, lambda j: j.status.value == S_RUNNING and j.step >= 3)
    slurm_id = job.backend_job_id
    assert slurm_id is not None
    # Slurm's time limit is whole minutes and its warning may come up to 60 s early (slurmctld checks every 30 s):
    # a limit of L minutes leaves a restarted attempt 60 L − margin − 60 s before it is warned. So the first attempt
    # runs 40 s, then gets a limit of at least 2 minutes that leaves it 45..105 s: the warning comes while it trains
    # (slowly).
    drive(agent, job_id, lambda j: run_seconds(slurm_cluster, slurm_id) >= 40)
    minutes = math.ceil((run_seconds(slurm_cluster, slurm_id) + 45) / 60)
    slurm_cluster.run("scontrol", "update", f"JobId={slurm_id}", f"TimeLimit={minutes}")
    # Requeued (restart 1 waits cred_expire before it may start): an admin gives it its time back, so the resumed
    # attempt is not warned while it starts on a loaded machine (each warned start would be one more requeue).
    drive(agent, job_id, lambda j: j.attempt >= 2, timeout=200)
    slurm_cluster.run("scontrol", "update", f"JobId={slurm_id}", "TimeLimit=30")
    job = drive(agent, job_id, lambda j: j.status in TERMINAL, timeout=240)
    assert job.status.value == "succeeded", job.error
    assert job.attempt == 2
    lines = timeline(agent, job_id)
    assert any(s == "queued" and a == 1 and "requeued by Slurm" in d for s, a, d in lines), lines
    stderr = run_dir(agent.settings, job_id) / "logs" / "attempt_1" / "0" / "stderr.log"
    assert WARNED_LINE.decode().strip() in stderr.read_text()  # the warning signal, not a preemption or a cancel
    batch = (run_dir(agent.settings, job_id) / "logs" / "slurm_batch.log").read_text()
    assert f"checkpointed on a stop signal; requeueing job {slurm_id}" in batch
    assert "attempt 2 resumes from step_" in batch
    assert_resumed_exact(agent, job_id, spec, tmp_path / "ref")


def test_a_job_slurm_preempts_and_does_not_requeue_is_submitted_again_by_the_agent(
    agent: Agent, slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    agent.settings = agent.settings.model_copy(update={"slurm_partition": "drop"})
    spec = first_attempt_slow("dropped")
    job_id = submit(agent, spec)
    job = drive(agent, job_id, lambda j: j.status.value == S_RUNNING and j.step >= 3)
    first_slurm_id = job.backend_job_id
    assert first_slurm_id is not None
    # An admin made it not requeueable: the batch script's own `scontrol requeue` is refused.
    slurm_cluster.run("scontrol", "update", f"JobId={first_slurm_id}", "Requeue=0")
    slurm_cluster.run(
        "sbatch", "--parsable", "-p", "high", "-N2", "--ntasks-per-node=2", "--output=/dev/null", "--wrap", "sleep 2"
    )
    job = drive(agent, job_id, lambda j: j.status in TERMINAL, timeout=300)
    assert job.status.value == "succeeded", job.error
    assert job.attempt == 2 and job.backend_job_id != first_slurm_id  # a new Slurm job, not a requeue
    lines = timeline(agent, job_id)
    again = [d for s, a, d in lines if s == "queued" and a == 1]
    assert again and "submitted again to resume" in again[0] and first_slurm_id in again[0], lines
    assert any(d == f"submitted to Slurm as job {job.backend_job_id}" for _, _, d in lines), lines
    assert_resumed_exact(agent, job_id, spec, tmp_path / "ref")
