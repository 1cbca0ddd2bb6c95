"""A user's script on a real Slurm (tests/slurm/cluster.py) gets what it gets on a worker's host: its TensorBoard
scalars become the job's metrics (worker/tensorboard.py → `Ingestor.ingest_metrics`, read by the agent), and its own
packages (spec `environment`) are built by the agent, once per lock, where the compute nodes see them."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlmodel import Session, select

from core.tables import JobEnvironment, JobStatus, MetricPoint
from tests.slurm.conftest import run_dir
from tests.slurm.driving import TERMINAL, drive, submit, timeline, upload
from worker.slurm import rows
from worker.slurm.agent import Agent

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]
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


ENV_SCRIPT = """import sys
import rzslurmpkg  # not in the service's environment: from the job's own, built by the agent
print("rzslurmpkg", rzslurmpkg.VERSION, "from", sys.executable, flush=True)
"""


def test_a_jobs_own_packages_are_built_once_in_the_shared_runs_dir_and_its_ranks_run_them(
    agent: Agent, tmp_path: Path
) -> None:
    from tests.environments.conftest import make_wheel

    make_wheel(tmp_path / "wheels", "rzslurmpkg", "1.2.3")
    agent.settings = agent.settings.model_copy(
        update={"environment_find_links": tmp_path / "wheels", "environment_offline": True}
    )
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(ENV_SCRIPT)
    code = upload(agent.settings, project)
    spec = {"name": "own-packages", "nproc": 2, "code": code, "entrypoint": "train.py",
            "environment": {"packages": ["rzslurmpkg==1.2.3"]}}  # fmt: skip
    shared = agent.settings.resolved_runs_dir / ".environments"
    for name in ("first", "second"):
        job_id = submit(agent, {**spec, "name": name})
        job = drive(agent, job_id, lambda j: j.status in TERMINAL)
        assert job.status is JobStatus.succeeded, job.error
        for rank in (0, 1):
            out = (run_dir(agent.settings, job_id) / "logs" / "attempt_1" / str(rank) / "stdout.log").read_text()
            assert f"rzslurmpkg 1.2.3 from {shared}/" in out, out
        with Session(agent.engine) as s:
            record = s.get(JobEnvironment, job_id)
            assert record is not None and record.state == "ready"
            assert record.cached is (name == "second")  # built once per lock; the second job's start is cached
        notes = [d for _, _, d in timeline(agent, job_id)]
        assert any(d.startswith("preparing environment: 1 requirement") for d in notes), notes
        assert any(d.startswith("submitted to Slurm as job ") and "environment: 1 package (1 own)" in d for d in notes)
    assert len([p for p in shared.iterdir() if not p.name.startswith(".")]) == 2  # one entry (and its size file)


def test_a_job_whose_packages_cannot_be_had_fails_before_slurm_sees_it(agent: Agent, tmp_path: Path) -> None:
    (tmp_path / "wheels").mkdir()
    agent.settings = agent.settings.model_copy(
        update={"environment_find_links": tmp_path / "wheels", "environment_offline": True}
    )
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("print('never')\n")
    spec = {"name": "no-such", "nproc": 1, "code": upload(agent.settings, project), "entrypoint": "train.py",
            "environment": {"packages": ["rankzero-no-such-q7x"]}}  # fmt: skip
    job_id = submit(agent, spec)
    job = drive(agent, job_id, lambda j: j.status in TERMINAL, timeout=120)
    assert job.status is JobStatus.failed and job.backend_job_id is None  # never submitted
    assert job.error is not None and "rankzero-no-such-q7x" in job.error, job.error


def test_a_script_that_only_prints_ends_with_its_step_and_series_from_its_console(agent: Agent) -> None:
    """tests/console/projects/printer in its nanoGPT voice (worker/console_feed.py, read by the agent as a worker)."""
    printer = Path(__file__).resolve().parents[1] / "console" / "projects" / "printer"
    spec = {"name": "console", "nproc": 2, "code": upload(agent.settings, printer), "entrypoint": "train.py nanogpt"}
    job_id = submit(agent, spec)
    job = drive(agent, job_id, lambda j: j.status in TERMINAL)
    assert job.status is JobStatus.succeeded, job.error
    with Session(agent.engine) as s:
        points = s.exec(select(MetricPoint).where(MetricPoint.job_id == job_id)).all()
    series: dict[str, list[tuple[int, float]]] = {}
    for p in sorted(points, key=lambda p: p.step):
        series.setdefault(p.name, []).append((p.step, p.value))
    assert set(series) == {"loss", "time", "mfu", "train loss", "val loss"}, set(series)
    assert [step for step, _ in series["loss"]] == list(range(31)) and series["loss"][-1] == (30, 2.5)
    assert series["val loss"] == [(0, 4.1), (10, 3.1), (20, 2.1), (30, 1.1)]
    assert job.step == 30 and job.latest_loss == 2.5
