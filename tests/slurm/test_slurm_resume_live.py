"""A built-in job resuming another job's checkpoint on a real Slurm (tests/slurm/cluster.py): the spec names it
by its key relative to the runs dir (core/resume_source.py); the batch step resolves it in the shared runs dir
(worker/slurm/prepare.py) and the trainer starts at that checkpoint's step, or, when it is gone, the job fails
before `srun` saying so."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from core.tables import JobStatus
from tests.slurm.conftest import run_dir
from tests.slurm.driving import TERMINAL, drive, submit
from worker.slurm.agent import Agent

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]
S = JobStatus
SPEC = {"name": "digits", "nproc": 1, "max_steps": 4, "batch_size": 16, "device": "cpu",
        "data": {"name": "digits"}, "model": {"name": "mlp"}}  # fmt: skip


def _started(agent: Agent, job_id: int) -> dict[str, Any]:
    lines = (run_dir(agent.settings, job_id) / "events.jsonl").read_text().splitlines()
    return next(e for e in map(json.loads, lines) if e.get("type") == "started")


def test_a_job_resumes_another_jobs_checkpoint_by_its_key(agent: Agent) -> None:
    first = submit(agent, SPEC)
    job = drive(agent, first, lambda j: j.status in TERMINAL)
    assert job.status is S.succeeded, job.error
    key = f"job_{first}/checkpoints/step_{4:08d}.pt"
    assert (Path(agent.settings.resolved_runs_dir) / key).is_file()

    second = submit(agent, {**SPEC, "name": "digits-resumed", "max_steps": 7, "resume_from": key})
    job = drive(agent, second, lambda j: j.status in TERMINAL)
    assert job.status is S.succeeded, job.error
    started = _started(agent, second)
    assert started["start_step"] == 4, started
    assert started["resumed_from"] == str((Path(agent.settings.resolved_runs_dir) / key).resolve())

    gone = submit(agent, {**SPEC, "name": "digits-gone", "resume_from": f"job_{first}/checkpoints/step_{9:08d}.pt"})
    job = drive(agent, gone, lambda j: j.status in TERMINAL)
    assert job.status is S.failed
    assert "cannot continue from it" in (job.error or ""), job.error
    assert not (run_dir(agent.settings, gone) / "events.jsonl").exists()
