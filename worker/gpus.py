"""Which GPUs this host has, and leasing them to jobs without torch.

A lease is an exclusive flock on one file per GPU, held by the supervising process for the
job's lifetime: if that process dies, the kernel releases the lock, so a crash never leaks GPUs.
Which GPUs a node gets is the scheduler's decision (worker/scheduler.py); the lease only makes sure
the job that had them before has let go.
"""

from __future__ import annotations

import fcntl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from core.capacity import host_gpus
from core.placement_record import PlacedNode
from core.settings import Settings


def lock_dir(settings: Settings) -> Path:
    path = settings.data_dir / "gpu-locks" / settings.resolved_host_name
    path.mkdir(parents=True, exist_ok=True)
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


def lease_exact(
    settings: Settings, wanted: list[str], *, keep_waiting: Callable[[], bool], poll_s: float = 0.5
) -> GpuLease | None:
    """Lease exactly the GPUs the scheduler placed a node on (worker/scheduler.py): they are free by the
    scheduler's account, but the job that had them may still be releasing them; wait for that.

    Returns None when `keep_waiting()` turns False (the job was cancelled or placed again)."""
    known = set(host_gpus(settings))
    missing = [g for g in wanted if g not in known]
    if missing:
        raise ValueError(f"placed on GPU(s) {', '.join(missing)} that this host does not have")
    directory = lock_dir(settings)
    while True:
        lease = GpuLease(gpus=[])
        for gpu in wanted:
            fh = _try_lock(directory / f"gpu{gpu}.lock")
            if fh is None:
                break
            lease.gpus.append(gpu)
            lease._files.append(fh)
        if len(lease.gpus) == len(wanted):
            return lease
        lease.release()
        if not keep_waiting():
            return None
        time.sleep(poll_s)


class StoppedWaiting(Exception):
    """The node's job left its placement (cancelled, placed again, ended) while its GPUs were released."""


def lease_node(settings: Settings, node: PlacedNode, *, keep_waiting: Callable[[], bool]) -> GpuLease | None:
    """The lease of a placed node's GPUs (None: a CPU node, nothing to hold). Raises StoppedWaiting."""
    if not node.gpus:
        return None
    lease = lease_exact(settings, list(node.gpus), keep_waiting=keep_waiting)
    if lease is None:
        raise StoppedWaiting
    return lease


def visible_devices(settings: Settings, lease: GpuLease | None) -> str | None:
    """CUDA_VISIBLE_DEVICES for a node: its leased GPUs; '' (none) on a GPU host for a CPU node; unset elsewhere."""
    if lease is not None:
        return lease.cuda_visible_devices
    return "" if host_gpus(settings) else None
