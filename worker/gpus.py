"""Which GPUs this host has, and leasing them to jobs without torch.

A lease is an exclusive flock on one file per GPU, held by the supervising process for the
job's lifetime: if that process dies, the kernel releases the lock, so a crash never leaks GPUs.
Jobs that do not fit wait in order (lowest job id first) via waiter files, also flock-held.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from core.capacity import host_gpus
from core.settings import Settings


def lock_dir(settings: Settings) -> Path:
    path = settings.data_dir / "gpu-locks" / socket.gethostname()
    (path / "waiting").mkdir(parents=True, exist_ok=True)
    return path


@dataclass
class GpuLease:
    gpus: list[str]
    _files: list[IO[str]] = field(default_factory=list, repr=False)

    @property
    def cuda_visible_devices(self) -> str:
        return ",".join(self.gpus)

    def release(self) -> None:
        for fh in self._files:
            fh.close()  # closing drops the flock
        self._files.clear()


def _try_lock(path: Path) -> IO[str] | None:
    fh = open(path, "a")  # noqa: SIM115  (the open file is the lock: the caller holds it, then closes it)
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.close()
        return None
    return fh


def _try_take(directory: Path, gpus: list[str], n: int) -> GpuLease | None:
    lease = GpuLease(gpus=[])
    for gpu in gpus:
        fh = _try_lock(directory / f"gpu{gpu}.lock")
        if fh is None:
            continue
        lease.gpus.append(gpu)
        lease._files.append(fh)
        if len(lease.gpus) == n:
            return lease
    lease.release()
    return None


def _head_of_line(waiting: Path, mine: Path) -> bool:
    """True when no live waiter has a smaller job id than ours (stale waiter files are removed)."""
    for other in sorted(waiting.iterdir()):
        if other == mine:
            return True
        fh = _try_lock(other)
        if fh is not None:  # nobody holds it: its waiter died
            other.unlink(missing_ok=True)
            fh.close()
            continue
        return False
    return True


def acquire(
    settings: Settings,
    job_id: int,
    n: int,
    *,
    keep_waiting: Callable[[], bool],
    poll_s: float = 0.5,
) -> GpuLease | None:
    """Lease `n` of this host's GPUs for job `job_id`, waiting in job-id order.

    Returns None when `keep_waiting()` turns False (the job was cancelled or claimed elsewhere).
    """
    gpus = host_gpus(settings)
    if n > len(gpus):
        raise ValueError(f"job needs {n} GPUs but this host has {len(gpus)}")
    directory = lock_dir(settings)
    waiting = directory / "waiting"
    mine = waiting / f"{job_id:012d}-{os.getpid()}"
    me = _try_lock(mine)
    try:
        while True:
            with open(directory / "alloc.lock", "a") as alloc:
                fcntl.flock(alloc, fcntl.LOCK_EX)
                if _head_of_line(waiting, mine):
                    lease = _try_take(directory, gpus, n)
                    if lease is not None:
                        return lease
            if not keep_waiting():
                return None
            time.sleep(poll_s)
    finally:
        mine.unlink(missing_ok=True)
        if me is not None:
            me.close()
