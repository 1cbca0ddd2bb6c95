"""rankzero's jobs on a real Slurm (tests/slurm/cluster.py: two nodes n1, n2 on this machine, partitions low
and high): the agent (worker/slurm/agent.py) submits, follows, ingests, cancels; the ranks run under `srun`
(worker/slurm/rank.py). Tiny jobs (digits); the weights are compared with the trainer run directly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func
from sqlmodel import Session, select

from core import jobs
from core.tables import Checkpoint, JobStatus, MetricPoint
from tests.slurm.cluster import SlurmCluster
from tests.slurm.conftest import run_dir
from tests.slurm.driving import TERMINAL, drive, final_checkpoint, submit, timeline
from tests.support import procs
from tests.support.jobs import assert_same_weights, reference_weights, slow_spec, wait
from tests.support.settings import settings_env
from worker.slurm.agent import Agent

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]
S = JobStatus
ROOT = Path(__file__).resolve().parents[2]


BUILTIN = {"name": "digits", "nproc": 2, "max_steps": 12, "batch_size": 16, "device": "cpu",
           "data": {"name": "digits"}, "model": {"name": "mlp"}}  # fmt: skip


def builtin_reference(tmp: Path) -> dict[str, Any]:
    """The trainer run directly, in this process: one rank, two micro-batches per step (the same global batch)."""
    import torch

    from trainer.spec import JobSpec
    from trainer.train import train

    ref = {**BUILTIN, "nproc": 1, "accumulation_steps": 2}
    assert train(JobSpec.model_validate(ref), tmp) == 0
    return torch.load(tmp / "checkpoints" / f"step_{BUILTIN['max_steps']:08d}.pt", map_location="cpu",
                      weights_only=True)["model"]  # fmt: skip


def test_builtin_two_ranks_ends_at_the_trainers_weights(agent: Agent, tmp_path: Path) -> None:
    job_id = submit(agent, BUILTIN)
    job = drive(agent, job_id, lambda j: j.status in TERMINAL)
    assert job.status is S.succeeded, job.error
    assert job.backend_job_id and job.backend_first_attempt == 1 and job.attempt == 1
    lines = timeline(agent, job_id)
    states = [s for i, (s, _, _) in enumerate(lines) if i == 0 or lines[i - 1][0] != s]  # notes repeat a state
    assert states == ["queued", "starting", "running", "succeeded"], lines
    assert any(d == f"submitted to Slurm as job {job.backend_job_id}" for _, _, d in lines), lines
    assert_same_weights(final_checkpoint(agent, job_id, BUILTIN["max_steps"]), builtin_reference(tmp_path / "ref"))
    logs = run_dir(agent.settings, job_id) / "logs" / "attempt_1"
    assert (logs / "0" / "stderr.log").exists() and (logs / "1" / "stderr.log").exists()
    batch = (run_dir(agent.settings, job_id) / "logs" / "slurm_batch.log").read_text()
    assert "ranks exited 0" in batch
    # CPU/memory samples per rank, as rankzero's own hosts record them (worker/slurm/samples.py).
    with Session(agent.engine) as s:
        names = set(s.exec(select(MetricPoint.name).where(MetricPoint.job_id == job_id)).all())
    assert {"sys/rank0/rss_mb", "sys/rank1/rss_mb", "sys/rss_mb_total", "sys/rank0/cpu_percent"} <= names, names


def _count(agent: Agent, model: Any, job_id: int) -> int:
    with Session(agent.engine) as s:
        return int(s.exec(select(func.count()).select_from(model).where(model.job_id == job_id)).one())


def test_two_nodes_one_rank_each_survive_the_agent_killed_and_restarted(
    agent: Agent, slurm_settings: Any, slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """2 nodes × 1 rank (n1 and n2) ends at the weights of 1 × 2; the agent (a real `rankzero slurm-agent`)
    is killed mid-run and started again: it reattaches from the database and ingests nothing twice."""
    spec = slow_spec("two-nodes", step_s=0.1, max_steps=30, every=10, nproc=1, nnodes=2, accumulation_steps=1)
    job_id = submit(agent, spec)
    env = settings_env(slurm_settings, SLURM_CONF=str(slurm_cluster.conf), PYTHONPATH=str(ROOT),
                       **{procs.MARKER_ENV: os.environ[procs.MARKER_ENV]})  # fmt: skip
    argv = [sys.executable, "-m", "cli.main", "slurm-agent"]
    log = tmp_path / "agent.log"

    def start() -> subprocess.Popen[bytes]:
        with open(log, "ab") as out:
            return subprocess.Popen(
                argv, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    first = start()
    try:
        wait(lambda: (j := jobs.get_job(agent.engine, job_id)) and j.status is S.running and j.step >= 5, 240,
             "the job to run a few steps")  # fmt: skip
        procs.stop_group(first)  # SIGKILL: no goodbye
        job = jobs.get_job(agent.engine, job_id)
        assert job is not None and job.status is S.running
        second = start()
        try:
            job = wait(lambda: (j := jobs.get_job(agent.engine, job_id)) and j.status in TERMINAL and j, 240,
                       "the job to end under the restarted agent")  # fmt: skip
        finally:
            procs.stop_group(second, signal.SIGTERM)
    finally:
        procs.stop_group(first)
    assert job.status is S.succeeded, (job.error, log.read_text()[-3000:])
    assert job.attempt == 1  # reattached, never resubmitted
    batch = (run_dir(slurm_settings, job_id) / "logs" / "slurm_batch.log").read_text()
    assert "on n[1-2]" in batch
    events = [json.loads(x) for x in (run_dir(slurm_settings, job_id) / "events.jsonl").read_text().splitlines()]
    metric_events = {(e["name"], e["step"]) for e in events if e["type"] == "metric"}
    with Session(agent.engine) as s:
        names = list(s.exec(select(MetricPoint.name).where(MetricPoint.job_id == job_id)).all())
    assert len([n for n in names if not n.startswith("sys/")]) == len(metric_events) > 0  # nothing ingested twice
    # Each node samples its own rank (worker/slurm/samples.py): node 1's total under a name of its own.
    assert {"sys/rank0/rss_mb", "sys/rank1/rss_mb", "sys/rss_mb_total", "sys/node1/rss_mb_total"} <= set(names)
    ckpt_events = {e["path"] for e in events if e["type"] == "checkpoint"}
    assert _count(agent, Checkpoint, job_id) == len(ckpt_events) > 0
    one_by_two = {**spec, "nproc": 2, "nnodes": 1}
    assert_same_weights(final_checkpoint(agent, job_id, 30), reference_weights(one_by_two, tmp_path / "ref"))


def test_cancel_ends_cancelled_with_nothing_left_running(
    agent: Agent, slurm_cluster: SlurmCluster, marker: str
) -> None:
    """Cancelled as soon as its ranks exist (typically while they still import torch: their handlers, installed
    first, note the stop); a cancelled job is not requeued by its batch script, and nothing is left running."""
    job_id = submit(agent, slow_spec("cancel-me", step_s=0.2, max_steps=500, every=50))
    drive(agent, job_id, lambda j: j.status is S.running)
    wait(lambda: len([p for p in procs.processes(marker) if p.env.get("SLURM_PROCID")]) >= 2, 60, "the two ranks")
    with Session(agent.engine) as s:
        assert jobs.transition(s, job_id, S.cancelling, detail="cancel requested by the test")
        s.commit()
    job = drive(agent, job_id, lambda j: j.status in TERMINAL, timeout=90)
    assert job.status is S.cancelled, job.error
    assert job.backend_job_id is not None
    out = slurm_cluster.run("squeue", "-h", "-t", "all", "-j", job.backend_job_id, "-o", "%T")
    assert out.strip() == "CANCELLED"
    wait(lambda: not procs.processes(marker), 30, "every process of the job to be gone")


PROJECT_SCRIPT = """\
import os, sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo")  # env:// from RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, as under torchrun
rank = dist.get_rank()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
print(f"rank {rank} of {dist.get_world_size()} local {os.environ['LOCAL_RANK']}: sum {t.item():g}", flush=True)
dist.barrier()
if rank == 1 and "--fail-on-rank-1" in sys.argv:
    raise ValueError("rank one refuses")
dist.destroy_process_group()
"""


def test_a_torchrun_script_runs_as_is_and_a_rank_1_failure_shows_its_traceback(
    agent: Agent, slurm_settings: Any, tmp_path: Path
) -> None:
    from core import bundles

    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(PROJECT_SCRIPT)
    tmp = bundles.incoming(slurm_settings)
    packed = bundles.pack(project, tmp)
    bundles.store(slurm_settings, tmp, packed.sha256)
    spec = {"name": "script", "nproc": 2, "code": f"sha256:{packed.sha256}", "entrypoint": "train.py --fail-on-rank-1"}
    job_id = submit(agent, spec)
    job = drive(agent, job_id, lambda j: j.status in TERMINAL)
    assert job.status is S.failed
    assert job.failed_rank == 1, job.error
    assert job.error is not None and "ValueError: rank one refuses" in job.error and "train.py" in job.error
    out0 = (run_dir(slurm_settings, job_id) / "logs" / "attempt_1" / "0" / "stdout.log").read_text()
    assert "rank 0 of 2 local 0: sum 3" in out0  # the all-reduce ran across both ranks


# Preemption (a low job checkpoints, requeues, resumes and ends exact): tests/slurm/test_slurm_requeue.py.
