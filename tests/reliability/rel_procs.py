"""Finding and ending the processes a test started, by what their environment says (never by name).

Every worker the tests start gets RANKZERO_RUNS_DIR=<the test's own runs dir>; torchrun and the
ranks inherit it. So "processes of this test" = processes whose environment holds that exact value.
The worker adds RANKZERO_JOB_MARK=<job>-<attempt>-<uuid> to torchrun and its ranks.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path


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
        return self.env.get("RANKZERO_JOB_MARK")


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def alive(pid: int) -> bool:
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


def processes_of(runs_dir: Path) -> list[Proc]:
    """Live processes (not zombies, not us) started for the test whose runs dir is `runs_dir`."""
    want = str(runs_dir)
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        env = _environ(int(entry.name))
        if env is not None and env.get("RANKZERO_RUNS_DIR") == want and alive(int(entry.name)):
            found.append(Proc(int(entry.name), env))
    return found


def job_processes(runs_dir: Path, job_id: int, attempt: int | None = None) -> list[Proc]:
    """torchrun and the ranks of job `job_id` (of one attempt when given)."""
    prefix = f"{job_id}-{attempt}-" if attempt is not None else f"{job_id}-"
    return [p for p in processes_of(runs_dir) if (p.job_mark or "").startswith(prefix)]


def ranks(runs_dir: Path, job_id: int, attempt: int | None = None) -> dict[int, int]:
    """rank → pid of the job's live trainer processes."""
    return {p.rank: p.pid for p in job_processes(runs_dir, job_id, attempt) if p.rank is not None}


def wait_ranks(runs_dir: Path, job_id: int, n: int, attempt: int | None = None, timeout: float = 60) -> dict[int, int]:
    deadline = time.monotonic() + timeout
    while True:
        found = ranks(runs_dir, job_id, attempt)
        if len(found) >= n:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id}: {n} ranks did not appear in {timeout} s (found {found})")
        time.sleep(0.1)


def kill_all(pids: list[int], sig: int = signal.SIGKILL) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def end_everything(runs_dir: Path) -> list[int]:
    """SIGCONT + SIGKILL every process of this test still alive (a failed test must not leak ranks)."""
    left = [p.pid for p in processes_of(runs_dir)]
    kill_all(left, signal.SIGCONT)
    kill_all(left, signal.SIGKILL)
    return left
