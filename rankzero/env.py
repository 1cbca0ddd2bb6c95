"""The environment the worker gives a script job's ranks, named once (the worker sets these, the SDK
reads them). Torch-free: the worker imports this module to build the ranks' environment.

    RANKZERO_RUN_DIR          the job's run directory (events.jsonl, checkpoints/); unset = local mode
    RANKZERO_JOB_ID           the job's id
    RANKZERO_ATTEMPT          which attempt this is (a restart or a resume after host loss adds one)
    RANKZERO_DATASETS_DIR     where shared data sets live on this host
    RANKZERO_TENSORBOARD_DIR  where a SummaryWriter should write (the worker ingests its scalars)
    RANKZERO_KEEP_LAST        how many checkpoints `save_checkpoint` keeps (default 3)
    RANKZERO_RESUME_FROM      the checkpoint this job continues from (spec `resume_from`: `rankzero resume`,
                              "Resume from here"); `load_checkpoint` returns it until the job saves its own
    RANKZERO_WORLD_SIZE       the ranks this attempt runs with (elastic fit, `min_nproc`, may launch fewer
                              than `nproc`); the same as torchrun's WORLD_SIZE
    RANKZERO_ACCUMULATION_STEPS  micro-batches per optimizer step the script should use so that the global
                              batch stays the spec's (1 at full size; nproc / world size when fewer ranks run)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

RUN_DIR = "RANKZERO_RUN_DIR"
JOB_ID = "RANKZERO_JOB_ID"
ATTEMPT = "RANKZERO_ATTEMPT"
DATASETS_DIR = "RANKZERO_DATASETS_DIR"
TENSORBOARD_DIR = "RANKZERO_TENSORBOARD_DIR"
KEEP_LAST = "RANKZERO_KEEP_LAST"
RESUME_FROM = "RANKZERO_RESUME_FROM"
WORLD_SIZE = "RANKZERO_WORLD_SIZE"
ACCUMULATION_STEPS = "RANKZERO_ACCUMULATION_STEPS"

NAMES = (
    RUN_DIR,
    JOB_ID,
    ATTEMPT,
    DATASETS_DIR,
    TENSORBOARD_DIR,
    KEEP_LAST,
    RESUME_FROM,
    WORLD_SIZE,
    ACCUMULATION_STEPS,
)
DEFAULT_KEEP_LAST = 3


@dataclass(frozen=True)
class JobEnv:
    """What a rank knows about the job it belongs to; `run_dir` None means local mode (no service)."""

    run_dir: Path | None = None
    job_id: int | None = None
    attempt: int | None = None
    datasets_dir: Path | None = None
    tensorboard_dir: Path | None = None
    keep_last: int = DEFAULT_KEEP_LAST
    resume_from: Path | None = None
    world_size: int | None = None
    accumulation_steps: int = 1

    @property
    def local(self) -> bool:
        return self.run_dir is None

    def as_environ(self) -> dict[str, str]:
        """The variables that describe this job (what the worker adds to the ranks' environment)."""
        values = {
            RUN_DIR: self.run_dir,
            JOB_ID: self.job_id,
            ATTEMPT: self.attempt,
            DATASETS_DIR: self.datasets_dir,
            TENSORBOARD_DIR: self.tensorboard_dir,
            KEEP_LAST: self.keep_last,
            RESUME_FROM: self.resume_from,
            WORLD_SIZE: self.world_size,
            ACCUMULATION_STEPS: self.accumulation_steps,
        }
        return {name: str(value) for name, value in values.items() if value is not None}


def _path(environ: Mapping[str, str], name: str) -> Path | None:
    value = environ.get(name, "").strip()
    return Path(value) if value else None


def _int(environ: Mapping[str, str], name: str) -> int | None:
    value = environ.get(name, "").strip()
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not an integer") from None


def read(environ: Mapping[str, str] | None = None) -> JobEnv:
    """The job this process belongs to, from `environ` (default: os.environ)."""
    environ = os.environ if environ is None else environ
    keep_last = _int(environ, KEEP_LAST)
    if keep_last is not None and keep_last < 1:
        raise ValueError(f"{KEEP_LAST}={keep_last} must be at least 1")
    accumulation = _int(environ, ACCUMULATION_STEPS)
    if accumulation is not None and accumulation < 1:
        raise ValueError(f"{ACCUMULATION_STEPS}={accumulation} must be at least 1")
    return JobEnv(
        run_dir=_path(environ, RUN_DIR),
        job_id=_int(environ, JOB_ID),
        attempt=_int(environ, ATTEMPT),
        datasets_dir=_path(environ, DATASETS_DIR),
        tensorboard_dir=_path(environ, TENSORBOARD_DIR),
        keep_last=DEFAULT_KEEP_LAST if keep_last is None else keep_last,
        resume_from=_path(environ, RESUME_FROM),
        world_size=_int(environ, WORLD_SIZE),
        accumulation_steps=1 if accumulation is None else accumulation,
    )
