"""Finding a job's processes: torchrun starts each rank in a new session, so its process group is
not enough. Every process we launch carries RANKZERO_JOB_MARK=<unique mark> in its environment;
/proc tells us which live processes (of our own user) carry it."""

from __future__ import annotations

import contextlib
import os
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
