"""What runs rankzero's jobs: a small typed interface, and the pools' choice of backend.

rankzero keeps everything a user comes for (the spec, the trainer, events, checkpoints, resume, the
dashboard, the CLI); a backend only runs a job's ranks and tells how they are doing. Two exist:

- `hosts` (the default; docs/scheduler.md): rankzero's own workers register hosts, the scheduler
  (worker/scheduler.py) gang-places queued rows and each node's worker (worker/node_zero.py) launches
  torchrun. Submitting is inserting the queued row; polling is reading rows (the supervisors write
  them); cancel, preemption and requeue are row writes the supervisors act on (`HostsBackend`).
- `slurm` (docs/slurm.md): a pool named by an agent's RANKZERO_SLURM_POOL is handed to an existing Slurm
  cluster by `rankzero slurm-agent` (worker/slurm/): one batch script per job, `sbatch`, one batched `squeue`
  per period, `scancel`; rankzero places nothing there (`SlurmBackend`, worker/slurm/backend.py). The agent
  registers its pool, so every API and scheduler knows it (core/pools.py: which pools exist, and their backend).

A Kubernetes backend (Kubeflow Trainer's TrainJob for the gang, Kueue for admission and quota) would
be a third implementation of `Backend`: submit = create the TrainJob, poll = one list call with a label
selector, cancel = delete, signal = Kueue's preemption (the pods get SIGTERM and checkpoint), requeue =
Kueue re-admits the suspended workload. It is named here and in docs/slurm.md, not built.

The interface and the hosts backend live here (core imports no worker); Slurm's is worker/slurm/backend.py.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from core import jobs
from core.tables import Job, JobStatus
from trainer.run_dir import RunDir


class BackendKind(str, enum.Enum):
    hosts = "hosts"
    slurm = "slurm"


class StopKind(str, enum.Enum):
    """Why a backend is asked to stop a job's ranks: each is a checkpoint first, then an exit."""

    cancel = "cancel"  # nothing runs again
    preempt = "preempt"  # checkpoint, step back, run again later (requeue)


@dataclass(frozen=True)
class Observation:
    """What a backend says about one of its jobs, in rankzero's words."""

    backend_job_id: str
    status: JobStatus | None  # the rankzero state it implies; None: nothing known now (never "gone")
    words: str  # for the job page: "Slurm job 12: waiting for resources in partition gpu"
    attempt: int | None = None  # the attempt the backend is running now (requeues add one)
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True)
class BackendStatus:
    """Where and how a backend runs a job now, as its agent last saw it: stored on the row (`jobs.backend_*`,
    migration 0013_backend_status) and shown by the job page, `rankzero show` and REST."""

    partition: str | None  # Slurm's partition (a Kubernetes backend: its queue)
    nodes: str | None  # the node list in the backend's own form ("n[1-2]"); None while it waits
    state: str | None  # the backend's own word for the state ("PENDING", "RUNNING", "COMPLETED")
    words: str  # that state in rankzero's words: "Slurm job 12: running on n[1-2] in partition gpu"

    def columns(self) -> dict[str, str | None]:
        """The row's columns, cut to their sizes."""
        return {
            "backend_partition": self.partition[:100] if self.partition else None,
            "backend_nodes": self.nodes[:4000] if self.nodes else None,
            "backend_state": self.state[:40] if self.state else None,
            "backend_state_words": self.words[:2000],
        }


class Backend(Protocol):
    """What rankzero asks of whatever runs its jobs. Every method is a call per period or per action;
    `poll` answers for many jobs in one batched call."""

    kind: BackendKind

    def submit(self, job_id: int, attempt: int, spec: Mapping[str, object]) -> str:
        """Hand attempt `attempt` of a job over; returns the backend's id for it (raises, saying why, when refused)."""
        ...

    def poll(self, backend_job_ids: Sequence[str]) -> dict[str, Observation]:
        """One batched look at these jobs; an id missing from the answer is unknown now, never finished."""
        ...

    def cancel(self, backend_job_id: str) -> None:
        """Stop the job for good: its ranks checkpoint, nothing runs again, nothing is left running."""
        ...

    def signal(self, backend_job_id: str, why: StopKind) -> None:
        """Ask the ranks to checkpoint and stop now (preemption) — the job is requeued, not ended."""
        ...

    def requeue(self, backend_job_id: str) -> None:
        """Put a stopped job back in the backend's queue (it resumes from its newest intact checkpoint)."""
        ...

    def logs(self, run_root: Path, attempt: int) -> dict[int, Path]:
        """Global rank → its stderr log for `attempt` (the run dir's layout, trainer/run_dir.py)."""
        ...


class HostsBackend:
    """rankzero's own hosts (the default), in the terms of `Backend`: each method names what already
    happens — the scheduler, the workers' supervisors and recovery do the work; nothing here is new."""

    kind = BackendKind.hosts

    def __init__(self, engine: Engine, runs_dir: Path) -> None:
        self.engine, self.runs_dir = engine, runs_dir

    def submit(self, job_id: int, attempt: int, spec: Mapping[str, object]) -> str:
        """The queued row is the submission: the scheduler places it (worker/scheduler.py)."""
        return str(job_id)

    def poll(self, backend_job_ids: Sequence[str]) -> dict[str, Observation]:
        """One read of the rows (the supervisors keep them true)."""
        ids = [int(i) for i in backend_job_ids if i.isdigit()]
        with Session(self.engine) as s:
            rows = s.exec(select(Job).where(col(Job.id).in_(ids))).all() if ids else []
            return {
                str(j.id): Observation(
                    str(j.id),
                    j.status,
                    j.pending_reason or j.status.value,
                    j.attempt,
                    tuple(j.worker_host.split(",")) if j.worker_host else (),
                )  # fmt: skip
                for j in rows
            }

    def cancel(self, backend_job_id: str) -> None:
        """queued → cancelled; live → cancelling, which node 0's watcher turns into SIGTERM, grace, SIGKILL."""
        job_id = int(backend_job_id)
        with Session(self.engine) as s:
            if not jobs.transition(s, job_id, JobStatus.cancelled, expect=JobStatus.queued, detail="cancel requested"):
                jobs.transition(s, job_id, JobStatus.cancelling, expect={JobStatus.starting, JobStatus.running},
                                detail="cancel requested")  # fmt: skip
            s.commit()

    def signal(self, backend_job_id: str, why: StopKind) -> None:
        """Preemption: `preempt_for` on the row; its supervisor checkpoints, stops and requeues it."""
        if why is StopKind.cancel:
            self.cancel(backend_job_id)
            return
        with self.engine.begin() as conn:
            jobs.request_preemption(conn, int(backend_job_id), int(backend_job_id))

    def requeue(self, backend_job_id: str) -> None:
        jobs.requeue(self.engine, int(backend_job_id), "requeued")

    def logs(self, run_root: Path, attempt: int) -> dict[int, Path]:
        return RunDir(run_root).rank_logs("stderr", attempt)
