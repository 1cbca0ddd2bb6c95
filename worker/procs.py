"""Finding a job's processes: torchrun starts each rank in a new session, so its process group is
not enough. Every process we launch carries RANKZERO_JOB_MARK=<unique mark> in its environment;
/proc tells us which live processes (of our own user) carry it."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def pids_with_mark(mark: str) -> list[int]:
    needle = f"RANKZERO_JOB_MARK={mark}".encode()
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
        if needle in env.split(b"\0"):
            found.append(int(entry.name))
    return found


def signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
