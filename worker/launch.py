"""Starting torchrun for one attempt of a job: command line, environment, free rendezvous port."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

from trainer.run_dir import RunDir

MARK_ENV = "RANKZERO_JOB_MARK"  # every rank inherits it: lets us find ranks torchrun put in new sessions


def trainer_module() -> str:
    # A test hook: tests may point the launcher at a stand-in trainer module.
    return os.environ.get("RANKZERO_TRAINER_MODULE", "trainer")


def free_port() -> int:
    """A TCP port nothing listens on now, for this attempt's c10d rendezvous (no two jobs share one)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Launched:
    proc: subprocess.Popen[bytes]
    mark: str
    port: int
    log_dir: Path
    launcher_log: Path


def build_command(run: RunDir, job_id: int, attempt: int, nproc: int, port: int) -> list[str]:
    return [
        sys.executable, "-m", "torch.distributed.run",
        "--nnodes=1",
        f"--nproc-per-node={nproc}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{port}",
        f"--rdzv-id=rankzero-{job_id}-{attempt}",
        "--max-restarts=0",  # restarts are the worker's business (spec.max_restarts), from a checkpoint
        f"--log-dir={run.attempt_logs(attempt)}",
        "--redirects=3",
        "-m", trainer_module(),
        "--spec", str(run.spec),
        "--run-dir", str(run.root),
    ]  # fmt: skip


def rank_env(mark: str, cuda_visible_devices: str | None) -> dict[str, str]:
    env = dict(os.environ)
    env[MARK_ENV] = mark
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("OMP_NUM_THREADS", "1")  # torchrun's default too; explicit so N ranks don't fight over cores
    if cuda_visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices
    # The repository root on the path, so `-m trainer` resolves however the worker was started.
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


def launch(
    run: RunDir, spec: dict, job_id: int, attempt: int, nproc: int, cuda_visible_devices: str | None
) -> Launched:
    """Write the attempt's spec and start torchrun in its own process group."""
    run.root.mkdir(parents=True, exist_ok=True)
    run.checkpoints.mkdir(exist_ok=True)
    log_dir = run.attempt_logs(attempt)
    log_dir.mkdir(parents=True, exist_ok=True)
    tmp = run.spec.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(spec, indent=2))
    tmp.replace(run.spec)
    port = free_port()
    mark = f"{job_id}-{attempt}-{uuid.uuid4().hex}"
    launcher_log = run.logs / f"attempt_{attempt}.torchrun.log"
    with open(launcher_log, "ab") as out:
        proc = subprocess.Popen(
            build_command(run, job_id, attempt, nproc, port),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=rank_env(mark, cuda_visible_devices),
            cwd=run.root,
            start_new_session=True,  # its own process group: a signal to the group reaches torchrun, never us
        )
    return Launched(proc=proc, mark=mark, port=port, log_dir=log_dir, launcher_log=launcher_log)
