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


RESUMING_SCRIPT = """import rankzero
checkpoint = rankzero.load_checkpoint()
print("resumed at", None if checkpoint is None else checkpoint["step"], flush=True)
"""


def test_a_script_job_gets_the_checkpoint_it_resumes_from(agent: Agent, tmp_path: Path) -> None:
    """RANKZERO_RESUME_FROM reaches a script's ranks on Slurm: its `rankzero.load_checkpoint()` returns the
    checkpoint the spec names on its first attempt (before, None: a resumed script started from scratch)."""
    import torch

    from tests.slurm.driving import upload

    key = "job_424242/checkpoints/step_00000003.pt"
    checkpoint = Path(agent.settings.resolved_runs_dir) / key
    checkpoint.parent.mkdir(parents=True)
    torch.save({"step": 3}, checkpoint)
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(RESUMING_SCRIPT)
    spec = {"name": "script-resumed", "nproc": 1, "code": upload(agent.settings, project), "entrypoint": "train.py",
            "resume_from": key}  # fmt: skip
    job_id = submit(agent, spec)
    job = drive(agent, job_id, lambda j: j.status in TERMINAL)
    assert job.status is S.succeeded, job.error
    out = (run_dir(agent.settings, job_id) / "logs" / "attempt_1" / "0" / "stdout.log").read_text()
    assert "resumed at 3" in out, out
