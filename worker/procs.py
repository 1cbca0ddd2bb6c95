"""A job's processes: finding them, and stopping them.

Finding: torchrun starts each rank in a new session, so its process group is not enough. Every
process we launch carries RANKZERO_JOB_MARK=<unique mark> in its environment; /proc tells us which
live processes (of our own user) carry it.

Stopping: SIGTERM (the trainer checkpoints and exits 75), a grace period, SIGKILL; no process of the
attempt is left behind."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path


def _live_environs() -> list[tuple[int, list[bytes]]]:
    """(pid, environment entries) of every live process we may read, zombies and ourselves left out."""
    me = os.getpid()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            env = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue  # gone, or not ours to read
        if state == "Z":
            continue  # a zombie is dead; its parent reaps it
        found.append((int(entry.name), env.split(b"\0")))
    return found


def pids_with_mark(mark: str) -> list[int]:
    needle = f"RANKZERO_JOB_MARK={mark}".encode()
    return [pid for pid, env in _live_environs() if needle in env]


def rank_pids(mark: str) -> dict[int, int]:
    """Global rank → the host pid of that rank's process, of the attempt marked `mark` (torchrun gives each
    rank RANK; the rank's own children, DataLoader workers, inherit it and are left out by their parent)."""
    needle = f"RANKZERO_JOB_MARK={mark}".encode()
    of_rank: dict[int, int] = {}
    for pid, env in _live_environs():
        rank = next((e[5:] for e in env if e.startswith(b"RANK=")), None)
        if needle in env and rank is not None and rank.isdigit():
            of_rank[pid] = int(rank)
    found: dict[int, int] = {}
    for pid, rank in sorted(of_rank.items()):
        parent = _parent(pid)
        if parent is None or of_rank.get(parent) != rank:
            found.setdefault(rank, pid)
    return found


def _parent(pid: int) -> int | None:
    try:
        return int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def describe(pids: list[int], limit: int = 8) -> str:
    """`pid: command line` of each of `pids` (at most `limit`, each cut at 120 characters), for a log line."""
    described = []
    for pid in pids[:limit]:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # gone meanwhile
        described.append(f"{pid}: {b' '.join(argv).decode(errors='replace').strip()[:120]}")
    more = f" (and {len(pids) - limit} more)" if len(pids) > limit else ""
    return "; ".join(described) + more if described else "nothing"


def _attempt_of(env: list[bytes]) -> int | None:
    """The attempt a process belongs to, from its mark `<job>-<attempt>-<hex>` (None: not one of ours)."""
    for item in env:
        if item.startswith(b"RANKZERO_JOB_MARK="):
            parts = item.split(b"=", 1)[1].split(b"-")
            return int(parts[1]) if len(parts) >= 3 and parts[1].isdigit() else 0
    return None


def pids_of_run(run_root: Path, before_attempt: int | None = None) -> list[int]:
    """torchrun and the ranks of any attempt of the job that runs in `run_root` (launch.py gives each
    of them RANKZERO_RUN_DIR=<run_root resolved> and a RANKZERO_JOB_MARK), whoever launched them.
    `before_attempt`: only those of earlier attempts (another node of this attempt may share the host)."""
    needle = f"RANKZERO_RUN_DIR={Path(run_root).resolve()}".encode()
    found = []
    for pid, env in _live_environs():
        attempt = _attempt_of(env) if needle in env else None
        if attempt is not None and (before_attempt is None or attempt < before_attempt):
            found.append(pid)
    return found


def signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


# --- stopping -----------------------------------------------------------------------------------


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def stop(
    proc: subprocess.Popen[bytes], mark: str, grace_s: float, keep_alive: Callable[[], object] | None = None
) -> int | None:
    """Stop torchrun and every rank; return torchrun's exit code. No process carrying `mark` is left.
    `keep_alive` is called about once a second while the ranks checkpoint (the job's heartbeat: a
    supervisor stopping its ranks is alive, and recovery must not take the job from it meanwhile)."""
    _signal_group(proc, signal.SIGTERM)
    signal_all(pids_with_mark(mark), signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    beat = time.monotonic()
    while time.monotonic() < deadline:
        if proc.poll() is not None and not pids_with_mark(mark):
            return proc.returncode
        if keep_alive is not None and time.monotonic() - beat >= 1.0:
            keep_alive()
            beat = time.monotonic()
        time.sleep(0.1)
    _signal_group(proc, signal.SIGKILL)
    signal_all(pids_with_mark(mark), signal.SIGKILL)
    return wait_gone(proc, mark)


def wait_gone(proc: subprocess.Popen[bytes], mark: str, timeout_s: float = 10.0) -> int | None:
    """Reap torchrun and make sure no rank outlives it (an orphaned rank is SIGKILLed)."""
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _signal_group(proc, signal.SIGKILL)
        proc.wait(timeout=timeout_s)
    deadline = time.monotonic() + timeout_s
    while (left := pids_with_mark(mark)) and time.monotonic() < deadline:
        signal_all(left, signal.SIGKILL)
        time.sleep(0.05)
    return proc.returncode


def stop_earlier_attempts(
    run_root: Path, grace_s: float, keep_alive: Callable[[], object] | None = None, attempt: int | None = None
) -> list[int]:
    """Before an attempt launches: stop every process any earlier attempt of this job left running
    (a supervisor that died or froze; its torchrun is not our child). SIGTERM first, so the ranks
    checkpoint on their way out, SIGKILL after `grace_s`; returns the pids found. Never two attempts at once.
    `keep_alive` is called about once a second meanwhile (the new attempt's heartbeat)."""
    found = pids_of_run(run_root, attempt)
    if not found:
        return []
    signal_all(found, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    beat = 0.0
    while (left := pids_of_run(run_root, attempt)) and time.monotonic() < deadline:
        if keep_alive is not None and time.monotonic() - beat >= 1.0:
            keep_alive()
            beat = time.monotonic()
        time.sleep(0.2)
    deadline = time.monotonic() + 10.0
    while left and time.monotonic() < deadline:
        signal_all(left, signal.SIGCONT)  # a stopped process dies of SIGKILL anyway; SIGCONT lets it be reaped
        signal_all(left, signal.SIGKILL)
        time.sleep(0.1)
        left = pids_of_run(run_root, attempt)
    return found
