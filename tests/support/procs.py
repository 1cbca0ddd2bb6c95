"""The one process scanner: finding, waiting for and ending the processes a test started. Never by name.

The rule: every process a test starts for the service (`Workers` in services.py) gets
RANKZERO_TEST_RUN=<marker>, a random value of that test's own (`new_marker()`); the Celery worker,
torchrun and every rank inherit it, even in sessions of their own. "This test's processes" = live
processes whose environment holds that exact value, so another run's processes (other suites launch
job 1 too) are never touched. The worker adds RANKZERO_JOB_MARK=<job>-<attempt>-<uuid> to torchrun
and its ranks (worker/launch.py), which tells one job's processes apart.

A process started directly gets a session (process group) of its own and is stopped through that
group: `stop_group()`.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.deadlines import deadline_in

MARKER_ENV = "RANKZERO_TEST_RUN"
JOB_MARK_ENV = "RANKZERO_JOB_MARK"


def new_marker() -> str:
    return secrets.token_hex(8)


@dataclass(frozen=True)
class Proc:
    pid: int
    env: dict[str, str]

    @property
    def rank(self) -> int | None:
        """The rank of a trainer process; None for torchrun, the worker and anything else."""
        return int(self.env["RANK"]) if "RANK" in self.env and "TORCHELASTIC_RUN_ID" in self.env else None

    @property
    def job_mark(self) -> str | None:
        return self.env.get(JOB_MARK_ENV)


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def alive(pid: int) -> bool:
    """Running or stopped; not gone, not a zombie."""
    state = _state(pid)
    return state is not None and state not in ("Z", "X")


def _environ(pid: int) -> dict[str, str] | None:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    env = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def processes(marker: str) -> list[Proc]:
    """Live processes (not zombies, not us) whose environment holds RANKZERO_TEST_RUN=`marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        env = _environ(int(entry.name))
        if env is not None and env.get(MARKER_ENV) == marker and alive(int(entry.name)):
            found.append(Proc(int(entry.name), env))
    return found


def job_processes(marker: str, job_id: int, attempt: int | None = None) -> list[Proc]:
    """torchrun and the ranks of job `job_id` (of one attempt when given)."""
    prefix = f"{job_id}-{attempt}-" if attempt is not None else f"{job_id}-"
    return [p for p in processes(marker) if (p.job_mark or "").startswith(prefix)]


def job_pids(marker: str, job_id: int) -> list[int]:
    return [p.pid for p in job_processes(marker, job_id)]


def ranks(marker: str, job_id: int, attempt: int | None = None) -> dict[int, int]:
    """rank → pid of the job's live trainer processes."""
    return {p.rank: p.pid for p in job_processes(marker, job_id, attempt) if p.rank is not None}


def wait_ranks(marker: str, job_id: int, n: int, attempt: int | None = None, timeout: float = 60) -> dict[int, int]:
    deadline = deadline_in(timeout)
    while True:
        found = ranks(marker, job_id, attempt)
        if len(found) >= n:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id}: {n} ranks did not appear in {timeout} s (found {found})")
        time.sleep(0.1)


def kill_all(pids: list[int], sig: int = signal.SIGKILL) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def end_everything(marker: str) -> list[int]:
    """SIGCONT + SIGKILL every process of this test still alive (a failed test must not leak ranks)."""
    left = [p.pid for p in processes(marker)]
    kill_all(left, signal.SIGCONT)
    kill_all(left, signal.SIGKILL)
    return left


def stop_group(proc: subprocess.Popen, sig: int = signal.SIGKILL, timeout: float = 30) -> None:
    """Signal the process group of `proc` (started with start_new_session=True), wait, SIGKILL it if it lingers."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
