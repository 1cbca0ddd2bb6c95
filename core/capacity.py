"""Can any host of the job's pool ever run it? The API calls `check_fits` at submit to refuse the impossible.

The hosts table (core/hosts.py: every worker registers its host's GPUs and CPU slots) is the
answer; the rules are the scheduler's own (core/placement.py `never_fits`). With no host
registered yet (an API started before its workers), the API host's GPUs stand in, so a job for
GPUs nobody has is still refused.
"""

from __future__ import annotations

import shutil
import subprocess

from core.settings import Settings
from trainer.spec import JobSpec


def detect_gpus() -> list[str]:
    """GPU indices `nvidia-smi -L` lists; none when it is absent or fails."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(line for line in out.splitlines() if line.startswith("GPU "))]


def host_gpus(settings: Settings) -> list[str]:
    """RANKZERO_GPUS ('0,1'; '' for none), else every GPU nvidia-smi sees."""
    if settings.gpus is not None:
        return [g.strip() for g in settings.gpus.split(",") if g.strip()]
    return detect_gpus()


def _known_hosts(settings: Settings, pool: str) -> list:
    from core import hosts, placement
    from core.db import get_engine

    rows = hosts.read_all(get_engine(settings.resolved_database_url), settings.resolved_stale_after_s)
    views = [h.view() for h in rows]  # draining hosts count at submit: they may come back
    if pool == settings.queue and not any(v.pool == pool for v in views):
        # Nobody registered for the default pool yet: this host stands in (CPU slots unbounded here; the
        # submit limits cap CPU ranks). Any other pool exists only once a host registered for it (core/pools.py).
        views.append(
            placement.HostView(
                name="(this host)", pool=pool, gpus=tuple(host_gpus(settings)), cpu_slots=4096, storage_id="local"
            )
        )
    return views


def gpus_needed(spec: JobSpec, host_gpu_count: int) -> int:
    """GPUs a job takes on a host with `host_gpu_count` GPUs (0: it runs on CPU)."""
    if spec.device == "cpu" or (spec.device == "auto" and host_gpu_count == 0):
        return 0
    if spec.sync == "dataparallel":
        return host_gpu_count  # one process driving every GPU of the host
    return spec.nproc


def largest_gpu_count(settings: Settings, pool: str | None = None) -> int:
    """The most GPUs any known host of hosts pool `pool` (default: the API's RANKZERO_QUEUE) has."""
    pool = pool or settings.queue
    return max((len(v.gpus) for v in _known_hosts(settings, pool) if v.pool == pool), default=0)


def check_fits(spec: JobSpec, settings: Settings, pool: str | None = None) -> str | None:
    """None when some host of hosts pool `pool` (default: the API's RANKZERO_QUEUE) could run `spec`, else the
    reason none ever could (and what to change). Only that pool's hosts count: capacity is per pool."""
    from core import placement

    pool = pool or settings.queue
    return placement.never_fits(spec, pool, _known_hosts(settings, pool))
