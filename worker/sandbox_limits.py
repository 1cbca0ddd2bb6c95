"""Limits every job gets before it can do damage (issue 34): a memory limit always (a job's /tmp and /dev/shm
are charged to it), sizes for those two tmpfs, and a file-size ceiling at its disk limit.

Before, a job without `memory_limit_mb` had none: its /tmp and /dev/shm were each a tmpfs of half the host's
memory charged to nobody, and the kernel's OOM killer picked the API or PostgreSQL, not the job that filled
them. Now every attempt's cgroup gets `memory_mb` below, and both tmpfs are sized to it (a tmpfs page is
charged to the cgroup of the process that wrote it: a job filling /dev/shm meets its own limit, first as
ENOSPC at the tmpfs's size, or as the OOM killer inside its own cgroup).
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass

MIB = 2**20
FILE_SIZE_FACTOR = 2  # no file of a job grows past this many times its disk limit (file_size_limit)


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


def disk_limit_mb(spec_value: object, default_mb: int) -> int | None:
    """The job's disk limit: its spec's `disk_limit_mb`, else RANKZERO_JOB_DISK_LIMIT_MB (0: none)."""
    if isinstance(spec_value, int) and not isinstance(spec_value, bool) and spec_value > 0:
        return spec_value
    return default_mb if default_mb > 0 else None


def file_size_limit(limit_mb: int | None) -> int:
    """RLIMIT_FSIZE for every process of the job: no file it writes (or fallocates) grows past twice its disk
    limit. The kernel refuses the write or fallocate past it with EFBIG at once (Python ignores the SIGXFSZ that
    comes with it): a single call can no longer fill the disk before any check runs. Twice, not once: a job that
    merely grows past its limit is still stopped by the worker's sample at the next heartbeat (worker/quota.py),
    which checkpoints its ranks and names the numbers, rather than failing on a bare "File too large". On a
    filesystem of its own the runs dir cannot reach the database's disk (docs/deploy.md)."""
    return resource.RLIM_INFINITY if limit_mb is None else FILE_SIZE_FACTOR * limit_mb * MIB
