"""Can any worker ever run this job? The API calls `check_fits` at submit to refuse the impossible.

Each worker records its GPUs in `<runs_dir>/.hosts/<hostname>.json` when it starts (the runs dir is
shared between API and workers in the embedded mode and in docker-compose). With no record, the
API host's own GPUs (RANKZERO_GPUS or nvidia-smi) stand in.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

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


def _hosts_dir(settings: Settings) -> Path:
    return settings.resolved_runs_dir / ".hosts"


def register_host(settings: Settings) -> Path:
    """Write this worker's GPU list where the API can read it."""
    directory = _hosts_dir(settings)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{socket.gethostname()}.json"
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"host": socket.gethostname(), "gpus": host_gpus(settings), "updated": time.time()}))
    tmp.replace(path)
    return path


def largest_gpu_count(settings: Settings) -> int:
    counts = []
    directory = _hosts_dir(settings)
    if directory.is_dir():
        for path in directory.glob("*.json"):
            try:
                counts.append(len(json.loads(path.read_text())["gpus"]))
            except (OSError, ValueError, KeyError, TypeError):
                continue
    if not counts:
        counts.append(len(host_gpus(settings)))
    return max(counts)


def gpus_needed(spec: JobSpec, host_gpu_count: int) -> int:
    """GPUs a job takes on a host with `host_gpu_count` GPUs (0: it runs on CPU)."""
    if spec.device == "cpu" or (spec.device == "auto" and host_gpu_count == 0):
        return 0
    if spec.sync == "dataparallel":
        return host_gpu_count  # one process driving every GPU of the host
    return spec.nproc


def check_fits(spec: JobSpec, settings: Settings) -> str | None:
    """None when some worker could run `spec`, else the reason it never could (and what to change)."""
    if spec.nnodes != 1:
        return "the service launches single-node jobs: set nnodes 1 (use nproc for more ranks on one host)"
    largest = largest_gpu_count(settings)
    if spec.device == "cuda" and largest == 0:
        return "device 'cuda' but no worker has a GPU: use device 'cpu' or 'auto'"
    if spec.sync == "dataparallel" and spec.device != "cpu" and largest < 2:
        return f"sync 'dataparallel' needs a worker with at least 2 GPUs; the largest has {largest}"
    needed = gpus_needed(spec, largest)
    if needed > largest:
        return (
            f"the job needs {needed} GPUs (nproc {spec.nproc}) but the largest worker has {largest}: "
            f"lower nproc to {largest} (use accumulation_steps to keep the global batch) or set device 'cpu'"
        )
    return None
