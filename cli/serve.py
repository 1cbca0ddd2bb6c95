"""Running the service's processes: `rankzero up` (API + worker, embedded), `api`, `worker`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import BinaryIO

from core.settings import Settings


def settings_env(settings: Settings) -> dict[str, str]:
    """This process's environment with `settings` on top: a child sees exactly the same settings."""
    return dict(os.environ) | settings.to_env()


def default_concurrency(settings: Settings) -> int:
    """RANKZERO_CONCURRENCY, else one job per GPU, else one per CPU slot (at most 8): as many as the
    scheduler may place on this host at once, so a placed job never waits behind the worker's pool."""
    from core.capacity import host_gpus

    if settings.concurrency:
        return settings.concurrency
    return max(1, len(host_gpus(settings)) or min(settings.resolved_cpu_slots, 8))


def worker_argv(concurrency: int, pool: str, loglevel: str = "info") -> list[str]:
    return ["worker", f"--pool={pool}", f"--concurrency={concurrency}", f"--loglevel={loglevel}",
            "--without-gossip", "--without-mingle"]  # fmt: skip


def run_worker(settings: Settings, concurrency: int | None, pool: str, loglevel: str = "info") -> None:
    """Migrate, then run a Celery worker in this process until it is stopped."""
    from worker.celery_app import app  # built from the same environment as `settings`
    from worker.lifecycle import prepare

    prepare(settings)
    app.worker_main(worker_argv(concurrency or default_concurrency(settings), pool, loglevel))


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM it when `rankzero up` dies, even by SIGKILL (Linux), so a
    killed `up` never leaves an orphaned worker behind (SIGTERM = the worker's graceful drain)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def start_worker_process(settings: Settings, concurrency: int | None, log_path: Path) -> subprocess.Popen[bytes]:
    """`rankzero worker` as a child in its own process group (for `rankzero up`)."""
    cmd = [
        sys.executable,
        "-m",
        "cli.main",
        "worker",
        "--concurrency",
        str(concurrency or default_concurrency(settings)),
    ]
    with open_private_log(log_path) as log:
        return subprocess.Popen(cmd, env=settings_env(settings), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=Path(__file__).resolve().parent.parent,
                                preexec_fn=_die_with_parent)  # fmt: skip


def open_private_log(path: Path) -> BinaryIO:
    """Append to a log file readable by its owner only (0600, whatever the umask): logs carry job specs and paths."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    return open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab")


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    """SIGTERM the worker itself (a warm shutdown: its jobs checkpoint and go back to the queue; its
    pool children must not get the signal, they are the supervisors), then SIGKILL the group."""
    if proc.poll() is None:
        try:
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        except ProcessLookupError:
            pass
