"""A job's own Slurm settings within its pool's bounds (worker/slurm/bounds.py), by tables, and on a real Slurm: a
per-job time limit and partition reach sbatch (read back from `scontrol show job`), the rendezvous ports come from
the pool's range, and a job asking for more than its pool allows fails before Slurm sees it, saying what to change."""

from __future__ import annotations

import re
from typing import Any

import pytest

from core.settings import Settings
from core.tables import JobStatus
from tests.slurm.cluster import SlurmCluster
from tests.slurm.conftest import run_dir
from tests.slurm.driving import TERMINAL, drive, submit
from trainer.spec import SlurmSpec
from worker.slurm.agent import Agent
from worker.slurm.bounds import JobBounds, OutOfBounds, job_bounds, port_range
from worker.slurm.script import BatchJob, render

pytestmark = pytest.mark.xdist_group("slurm")
S = JobStatus
POOL = Settings.model_validate({"slurm_pool": "gpu", "slurm_partition": "low", "slurm_partitions": "high, solo",
                                "slurm_time_limit_min": 60, "slurm_max_time_limit_min": 240,
                                "slurm_signal_margin_s": 120})  # fmt: skip


@pytest.mark.parametrize(
    ("asked", "got"),
    [
        (None, JobBounds(60, "low")),
        ({}, JobBounds(60, "low")),
        ({"time_limit_min": 240}, JobBounds(240, "low")),
        ({"time_limit_min": 5, "partition": "solo"}, JobBounds(5, "solo")),
        ({"partition": "low"}, JobBounds(60, "low")),
    ],
)
def test_within_bounds(asked: dict[str, Any] | None, got: JobBounds) -> None:
    assert job_bounds(SlurmSpec.model_validate(asked) if asked is not None else None, POOL) == got


@pytest.mark.parametrize(
    ("asked", "settings", "words"),
    [
        ({"time_limit_min": 241}, {}, "exceeds pool gpu's maximum of 240 minutes"),
        ({"time_limit_min": 61}, {"slurm_max_time_limit_min": None}, "maximum of 60 minutes"),  # the default is the max
        ({"time_limit_min": 3}, {}, "leaves no time to train"),  # 180 s ≤ 120 s margin + 60 s
        ({"partition": "gpu"}, {}, "not one pool gpu allows: low, high, solo"),
        ({"partition": "high"}, {"slurm_partition": None, "slurm_partitions": ""}, "allows: none"),
    ],
)  # fmt: skip
def test_out_of_bounds(asked: dict[str, Any], settings: dict[str, Any], words: str) -> None:
    with pytest.raises(OutOfBounds, match=re.escape(words)):
        job_bounds(SlurmSpec.model_validate(asked), POOL.model_copy(update=settings))


def test_the_rendezvous_port_comes_from_the_pools_range() -> None:
    assert port_range(POOL) == (20000, 20000)
    base, span = port_range(POOL.model_copy(update={"slurm_port_range": "31000-31009"}))
    text = render(BatchJob(pool="gpu", job_id=7, first_attempt=1, run_root=run_dir(POOL, 7), python="/py", nnodes=1,
                           ntasks_per_node=1, port_base=base, port_span=span))  # fmt: skip
    assert "export MASTER_PORT=$(( 31000 + (SLURM_JOB_ID * 8 + ${SLURM_RESTART_COUNT:-0}) % 10 ))" in text
    with pytest.raises(ValueError, match="1024"):
        Settings.model_validate({"slurm_port_range": "80-90"})


TINY = {"name": "tiny", "nproc": 2, "max_steps": 4, "batch_size": 16, "device": "cpu", "data": {"name": "digits"},
        "model": {"name": "mlp"}}  # fmt: skip


@pytest.mark.slow
def test_a_jobs_own_time_limit_and_partition_reach_sbatch(agent: Agent, slurm_cluster: SlurmCluster) -> None:
    agent.settings = agent.settings.model_copy(
        update={"slurm_partitions": "solo", "slurm_max_time_limit_min": 30, "slurm_port_range": "31000-31099"}
    )
    too_long = submit(agent, {**TINY, "slurm": {"time_limit_min": 45}})
    job_id = submit(agent, {**TINY, "slurm": {"time_limit_min": 7, "partition": "solo"}})
    refused = drive(agent, too_long, lambda j: j.status in TERMINAL)
    assert refused.status is S.failed and refused.backend_job_id is None
    assert refused.error is not None and "exceeds pool" in refused.error and "maximum of 30 minutes" in refused.error
    job = drive(agent, job_id, lambda j: j.backend_job_id is not None)
    shown = slurm_cluster.run("scontrol", "show", "job", "-o", str(job.backend_job_id))
    assert " TimeLimit=00:07:00 " in shown and " Partition=solo " in shown, shown
    job = drive(agent, job_id, lambda j: j.status in TERMINAL)
    assert job.status is S.succeeded, job.error  # the ranks met on a port of the pool's range
    script = (run_dir(agent.settings, job_id) / "slurm_attempt_1.sbatch").read_text()
    assert "% 100 ))" in script and "31000 + " in script
