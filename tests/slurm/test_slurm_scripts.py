"""A user's script on a real Slurm (tests/slurm/cluster.py) gets what it gets on a worker's host: its TensorBoard
scalars become the job's metrics (worker/tensorboard.py → `Ingestor.ingest_metrics`, read by the agent)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlmodel import Session, select

from core.tables import JobStatus, MetricPoint
from tests.slurm.driving import TERMINAL, drive, submit, upload
from worker.slurm import rows
from worker.slurm.agent import Agent

pytestmark = pytest.mark.slow
PROJECTS = Path(__file__).resolve().parents[1] / "scripts" / "projects"


def test_tensorboard_scalars_of_a_script_become_its_metrics(agent: Agent) -> None:
    code = upload(agent.settings, PROJECTS / "tensorboard")
    job_id = submit(agent, {"name": "tensorboard", "nproc": 2, "code": code, "entrypoint": "train.py"})
    job = drive(agent, job_id, lambda j: j.status in TERMINAL)
    assert job.status is JobStatus.succeeded, job.error
    with Session(agent.engine) as s:
        points = s.exec(select(MetricPoint).where(MetricPoint.job_id == job_id)).all()
    by_name: dict[str, list[int]] = {}
    for p in points:
        by_name.setdefault(p.name, []).append(p.step)
    assert sorted(by_name["train/loss"]) == list(range(1, 9)) and sorted(by_name["lr"]) == list(range(1, 9))
    assert job.step == 8  # a script that reports no progress: its step is its metrics' newest
    # An agent started afresh reads the files from the start and writes nothing twice.
    fresh = Agent(agent.engine, agent.settings, agent.run)
    fresh._ingest(rows.Row(job_id, job.status, job.attempt, job.backend_job_id, job.backend_first_attempt, None, {}))
    with Session(agent.engine) as s:
        assert len(s.exec(select(MetricPoint).where(MetricPoint.job_id == job_id)).all()) == len(points)
