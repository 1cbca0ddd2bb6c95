"""Limits every job gets before it can do damage (issue 34): a memory limit always (a job's /tmp and /dev/shm
are charged to it), and sizes for those two tmpfs.

Before, a job without `memory_limit_mb` had none: its /tmp and /dev/shm were each a tmpfs of half the host's
memory charged to nobody, and the kernel's OOM killer picked the API or PostgreSQL, not the job that filled
them. Now every attempt's cgroup gets `memory_mb` below, and both tmpfs are sized to it (a tmpfs page is
charged to the cgroup of the process that wrote it: a job filling /dev/shm meets its own limit, first as
ENOSPC at the tmpfs's size, or as the OOM killer inside its own cgroup).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

MIB = 2**20


@dataclass(frozen=True)
class MemoryDecision:
    limit_mb: int
    note: str | None  # said to the job's launcher log when the job asked for more than it got


def host_memory_mb() -> int:
    """The host's (or the worker's container's, whatever the kernel reports here) physical memory."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // MIB


def ceiling_mb(host_mb: int, fraction: float) -> int:
    """The most memory one job may have on this host: `fraction` of it (RANKZERO_JOB_MEMORY_FRACTION)."""
    return max(64, int(host_mb * fraction))


def memory_mb(requested_mb: int | None, host_mb: int, fraction: float) -> MemoryDecision:
    """The job's memory limit: what it (its spec, else the server's RANKZERO_JOB_MEMORY_LIMIT_MB) asked for,
    within the ceiling; the ceiling when it asked for nothing."""
    top = ceiling_mb(host_mb, fraction)
    if requested_mb is None or requested_mb <= 0:
        return MemoryDecision(top, None)
    if requested_mb > top:
        note = (
            f"memory_limit_mb {requested_mb:,} is over this host's ceiling of {top:,} MiB "
            f"(RANKZERO_JOB_MEMORY_FRACTION {fraction:g} of {host_mb:,} MiB): the job gets {top:,} MiB"
        )
        return MemoryDecision(top, note)
    return MemoryDecision(requested_mb, None)


def tmpfs_bytes(limit_mb: int) -> int:
    """The size of the job's /tmp and of its /dev/shm: its memory limit (they cannot hold more of it anyway)."""
    return limit_mb * MIB
