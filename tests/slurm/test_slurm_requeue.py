"""Jobs of a Slurm pool that Slurm stops come back and end exact, on a real Slurm (tests/slurm/cluster.py):

- near its time limit, Slurm's warning signal (`--signal=USR1@margin`) makes the ranks checkpoint and exit 75, and
  the batch script requeues its own job, which resumes from the checkpoint;
- preempted in the `low` partition (PreemptMode=REQUEUE), a job checkpoints within GraceTime and is requeued;
- preempted in the `drop` partition, whose preempted jobs Slurm cancels (PreemptMode=CANCEL: no requeue by Slurm,
  and the batch script's own requeue refused for a job an admin made not requeueable), a job checkpoints and the
  agent submits it again as a new Slurm job.

Slurm's timers make each of these take a minute or more, mostly waiting: the three run at once (module fixture
`stopped`: the time-limit job on n3, the other two on n1 and n2, preempted together by one high-partition job that
needs both nodes whole), and each test asserts on its own job. The first attempt trains slowly
(tests/slurm/first_attempt_slow.py) so that the signal surely finds it training; the resumed attempt ends in
seconds. The weights are compared with the trainer run uninterrupted."""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from core.db import get_engine
from core.migrate import upgrade
from core.settings import Settings
from core.tables import Job
from tests.slurm.cluster import SlurmCluster
from tests.slurm.conftest import run_dir
from tests.slurm.driving import TERMINAL, final_checkpoint, submit, timeline
from tests.support import procs
from tests.support.jobs import assert_same_weights, reference_weights
from tests.support.settings import API_TOKEN
from worker.slurm.agent import Agent
from worker.slurm.commands import Runner
from worker.slurm.rank import WARNED_LINE

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]
S_RUNNING = "running"
SLOW_FIRST = "tests.slurm.first_attempt_slow"  # the user code of these jobs
DEADLINE_S = 420  # for all three jobs together


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


@dataclass
class Stopped:
    """The three jobs, each with the agent of its pool; `first_slurm_ids`: each job's Slurm job id as it first ran."""

    cluster: SlurmCluster
    agents: dict[str, Agent] = field(default_factory=dict)
    specs: dict[str, dict[str, Any]] = field(default_factory=dict)
    ids: dict[str, int] = field(default_factory=dict)
    first_slurm_ids: dict[str, str] = field(default_factory=dict)
    done: dict[str, bool] = field(default_factory=dict)  # what the fixture did to each: limit set, preempted...

    def job(self, name: str) -> Job:
        from core import jobs

        row = jobs.get_job(self.agents[name].engine, self.ids[name])
        assert row is not None
        return row

    def stderr(self, name: str, rank: int = 0) -> str:
        path = run_dir(self.agents[name].settings, self.ids[name]) / "logs" / "attempt_1" / str(rank) / "stderr.log"
        return path.read_text() if path.exists() else ""


def _agent(settings: Settings, cluster: SlurmCluster) -> Agent:
    upgrade(settings.resolved_database_url)
    return Agent(get_engine(settings.resolved_database_url), settings, Runner(env=cluster.env))


@pytest.fixture(scope="module")
def stopped(slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stopped]:
    root = tmp_path_factory.mktemp("stopped")
    marker = procs.new_marker()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLURM_CONF", str(slurm_cluster.conf))
        mp.setenv("OMP_NUM_THREADS", "1")
        mp.setenv(procs.MARKER_ENV, marker)
        values: dict[str, Any] = {
            "data_dir": root / "data", "runs_dir": root / "runs", "database_url": f"sqlite:///{root / 'rz.db'}",
            "api_token": API_TOKEN, "broker_url": f"sqla+sqlite:///{root / 'broker.db'}", "slurm_poll_s": 0.3,
        }  # fmt: skip
        base = Settings(**values)
        base.data_dir.mkdir(parents=True, exist_ok=True)
        base.resolved_runs_dir.mkdir(parents=True, exist_ok=True)
        # The time-limit job's margin is longer than any limit the test sets: see _time_limit.
        pools = {"limit": ("solo", 150), "requeued": ("low", 60), "dropped": ("drop", 60)}
        run = Stopped(slurm_cluster)
        for name, (partition, margin) in pools.items():
            settings = base.model_copy(update={"slurm_pool": f"slurm-stopped-{name}", "slurm_partition": partition,
                                               "slurm_signal_margin_s": margin})  # fmt: skip
            run.agents[name] = _agent(settings, slurm_cluster)
        run.specs = {
            # 80 s of training in attempt 1: warned long before its end; short steps: the ranks agree to stop (every
            # 16 steps, trainer/train.py CONTROL_EVERY) within 4 s of the warning.
            "limit": first_attempt_slow("time-limit", max_steps=400, step_s=0.2),
            "requeued": first_attempt_slow("requeued", max_steps=120),
            "dropped": first_attempt_slow("dropped", max_steps=120),
        }
        try:
            for name, spec in run.specs.items():
                run.ids[name] = submit(run.agents[name], spec)
            _drive(run)
            yield run
        finally:
            out = slurm_cluster.run("squeue", "-h", "-o", "%i %j", check=False)
            mine = [line.split()[0] for line in out.splitlines() if "rankzero-slurm-stopped-" in line]
            if mine:
                slurm_cluster.run("scancel", *mine, check=False)
            procs.end_everything(marker)


def _drive(run: Stopped) -> None:
    """The agents' periods until every job has ended (or the deadline), acting on each job as its scenario says."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        for agent in run.agents.values():
            agent.step()
        rows = {name: run.job(name) for name in run.agents}
        if all(row.status in TERMINAL for row in rows.values()):
            return
        _time_limit(run, rows["limit"])
        _preemption(run, rows["requeued"], rows["dropped"])
        time.sleep(0.3)


def _training(row: Job) -> bool:
    return row.status.value == S_RUNNING and row.step >= 3


def _time_limit(run: Stopped, row: Job) -> None:
    """slurmctld checks time limits every 30 s (PERIODIC_TIMEOUT, not configurable) and warns at the first check where
    the time left is under margin + 30 s; it ends the job at the first check past its limit (whole minutes). With a
    margin longer than any limit set here, the warning comes at the first check after the limit is set (≤ 30 s), and
    the job's end at least one check (30 s) later: the ranks checkpoint and requeue in between."""
    slurm_id = row.backend_job_id
    if not run.done.get("limit set") and _training(row) and slurm_id is not None:
        run.first_slurm_ids["limit"] = slurm_id
        minutes = math.ceil((run_seconds(run.cluster, slurm_id) + 40) / 60)  # the next check (≤ 31 s) comes first
        run.cluster.run("scontrol", "update", f"JobId={slurm_id}", f"TimeLimit={minutes}")
        run.done["limit set"] = True
    elif run.done.get("limit set") and not run.done.get("limit lifted") and _requeueing(run, "limit"):
        # Warned, and requeued by its batch step for it (which asks Slurm how near the limit is: lifted before, it
        # would be a stop signal from outside, not requeued): an admin gives it its time back, so the resumed attempt
        # is not warned as it starts (restart 1 waits cred_expire before it may start; each warned start would be
        # one more requeue).
        assert WARNED_LINE.decode() in run.stderr("limit")
        run.cluster.run("scontrol", "update", f"JobId={run.first_slurm_ids['limit']}", "TimeLimit=30")
        run.done["limit lifted"] = True


def _requeueing(run: Stopped, name: str) -> bool:
    log = run_dir(run.agents[name].settings, run.ids[name]) / "logs" / "slurm_batch.log"
    return log.exists() and "checkpointed on a stop signal; requeueing job" in log.read_text()


def _preemption(run: Stopped, requeued: Job, dropped: Job) -> None:
    """Once both train: the dropped one made not requeueable (by an admin: its batch script's own `scontrol requeue`
    is refused), then a high-partition job that needs n1 and n2 whole preempts both."""
    if run.done.get("preempted") or not (_training(requeued) and _training(dropped)):
        return
    assert requeued.backend_job_id is not None and dropped.backend_job_id is not None
    run.first_slurm_ids.update(requeued=requeued.backend_job_id, dropped=dropped.backend_job_id)
    run.cluster.run("scontrol", "update", f"JobId={dropped.backend_job_id}", "Requeue=0")
    run.cluster.run(
        "sbatch", "--parsable", "-p", "high", "-N2", "--ntasks-per-node=2", "--output=/dev/null", "--wrap", "sleep 2"
    )
    run.done["preempted"] = True


def events(agent: Agent, job_id: int) -> list[dict[str, Any]]:
    lines = (run_dir(agent.settings, job_id) / "events.jsonl").read_text().splitlines()
    return [json.loads(x) for x in lines]


def assert_ended_resumed_exact(run: Stopped, name: str, tmp: Path) -> Job:
    """The job succeeded in attempt 2, which resumed from attempt 1's checkpoint, at the uninterrupted run's weights."""
    job, agent, spec = run.job(name), run.agents[name], run.specs[name]
    assert job.status.value == "succeeded", (job.status, job.error, run.done)
    assert job.attempt == 2
    started = [e for e in events(agent, job.id or 0) if e["type"] == "started"]
    assert len(started) == 2 and started[-1].get("resumed_from"), started
    assert_same_weights(final_checkpoint(agent, job.id or 0, spec["max_steps"]), reference_weights(spec, tmp))
    # Every rank of the resumed attempt exited 0: none died in process-group teardown after `finished` (gloo's
    # abort, exit 134: the job would still succeed, worker/slurm/agent.py `ending`, but rank.py's exit_now prevents it).
    batch = (run_dir(agent.settings, job.id or 0) / "logs" / "slurm_batch.log").read_text()
    assert [line for line in batch.splitlines() if "ranks exited" in line][-1].strip() == "rankzero: ranks exited 0"
    return job


def test_the_time_limits_warning_checkpoints_requeues_and_the_job_ends_exact(stopped: Stopped, tmp_path: Path) -> None:
    job = assert_ended_resumed_exact(stopped, "limit", tmp_path)
    slurm_id = stopped.first_slurm_ids["limit"]
    assert job.backend_job_id == slurm_id  # requeued: the same Slurm job
    assert stopped.done.get("limit lifted")  # the warning signal came (not a preemption or a cancel)
    lines = timeline(stopped.agents["limit"], stopped.ids["limit"])
    assert any(s == "queued" and a == 1 and d.startswith("its time limit was near") for s, a, d in lines), lines
    batch = (run_dir(stopped.agents["limit"].settings, stopped.ids["limit"]) / "logs" / "slurm_batch.log").read_text()
    assert f"checkpointed on a stop signal; requeueing job {slurm_id}" in batch
    assert "attempt 2 resumes from step_" in batch


def test_a_job_preempted_in_a_requeue_partition_checkpoints_requeues_resumes_and_ends_exact(
    stopped: Stopped, tmp_path: Path
) -> None:
    assert stopped.done.get("preempted")
    assert_ended_resumed_exact(stopped, "requeued", tmp_path)
    lines = timeline(stopped.agents["requeued"], stopped.ids["requeued"])
    again = [d for s, a, d in lines if s == "queued" and a == 1]
    # Requeued by its batch script, else submitted again by the agent: never lost, never run twice; named a preemption.
    assert again and (again[0].startswith("preempted in partition low") or "submitted again" in again[0]), lines
    batch = run_dir(stopped.agents["requeued"].settings, stopped.ids["requeued"]) / "logs" / "slurm_batch.log"
    assert "attempt 2 resumes from step_" in batch.read_text()


def test_a_job_slurm_preempts_and_does_not_requeue_is_submitted_again_by_the_agent(
    stopped: Stopped, tmp_path: Path
) -> None:
    assert stopped.done.get("preempted")
    job = assert_ended_resumed_exact(stopped, "dropped", tmp_path)
    first = stopped.first_slurm_ids["dropped"]
    assert job.backend_job_id != first  # a new Slurm job, not a requeue
    lines = timeline(stopped.agents["dropped"], stopped.ids["dropped"])
    again = [d for s, a, d in lines if s == "queued" and a == 1]
    assert again and "submitted again to resume" in again[0] and first in again[0], lines
    assert any(d == f"submitted to Slurm as job {job.backend_job_id}" for _, _, d in lines), lines
