"""What the API shows of a Slurm pool: its nodes as the agent last saw them (GET /api/slurm/nodes, the hosts
page) and a job waiting in Slurm's queue (its Slurm job id and Slurm's reason in words). No cluster needed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update
from sqlmodel import Session

from api.app import create_app
from core import jobs
from core.db import get_engine
from core.migrate import upgrade
from core.tables import Job, JobStatus
from worker.slurm import rows
from worker.slurm.commands import parse_sinfo

pytestmark = pytest.mark.xdist_group("slurm")

SINFO = "n1|low*|idle|none|2|(null)\nn1|high|idle|none|2|(null)\nn2|low*|drained|disk failing|2|gpu:a100:4\n"


def test_nodes_and_a_waiting_job(api_settings: Callable[..., Any], auth_headers: dict[str, str]) -> None:
    settings = api_settings()
    upgrade(settings.resolved_database_url)
    engine = get_engine(settings.resolved_database_url)
    rows.replace_nodes(engine, "cluster", parse_sinfo(SINFO))
    rows.replace_nodes(engine, "cluster", parse_sinfo(SINFO))  # a new snapshot replaces the old one
    with Session(engine) as s:
        job_id = jobs.create(s, "waits", {"name": "waits"}, "cluster").id
    assert job_id is not None
    claimed = rows.claim(engine, job_id, None, settings.resolved_runs_dir, "cluster", "handed to Slurm")
    assert claimed is not None and claimed.attempt == 1 and claimed.worker_host == "slurm:cluster"
    assert rows.record_submitted(engine, job_id, 1, "41", 1)
    rows.set_reason(engine, job_id, 1, "Slurm job 41: waiting for resources in partition low")
    with TestClient(create_app(settings), headers=auth_headers) as client:
        nodes = client.get("/api/slurm/nodes").json()
        assert [(n["node"], n["partition"], n["state"]) for n in nodes] == [
            ("n1", "high", "idle"), ("n1", "low", "idle"), ("n2", "low", "drained"),
        ]  # fmt: skip
        assert nodes[2]["reason"] == "disk failing" and nodes[2]["gres"] == "gpu:a100:4" and nodes[0]["reason"] is None
        job = client.get(f"/api/jobs/{job_id}").json()
        assert job["status"] == "starting" and job["backend_job_id"] == "41"
        assert job["pending_reason"] == "Slurm job 41: waiting for resources in partition low"
        with engine.begin() as conn:  # running: no reason shown
            conn.execute(update(Job).where(Job.id == job_id).values(status=JobStatus.running))  # type: ignore[arg-type]
        assert client.get(f"/api/jobs/{job_id}").json()["pending_reason"] is None


def test_the_scheduler_leaves_a_slurm_pools_jobs_alone(api_settings: Callable[..., Any]) -> None:
    """rankzero places nothing in a Slurm pool: its queued jobs are not the scheduler's to place or explain."""
    from worker.scheduler import _read

    settings = api_settings(queue="cluster", slurm_pool="cluster")
    upgrade(settings.resolved_database_url)
    engine = get_engine(settings.resolved_database_url)
    with Session(engine) as s:
        to_slurm = jobs.create(s, "to-slurm", {"name": "to-slurm", "max_steps": 5}, "cluster").id
        to_hosts = jobs.create(s, "to-hosts", {"name": "to-hosts", "max_steps": 5}, "gpu-boxes").id
    waiting = {w.job_id for w in _read(engine, settings).waiting}
    assert to_hosts in waiting and to_slurm not in waiting
