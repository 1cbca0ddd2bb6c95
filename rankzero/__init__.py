"""rankzero, the SDK for your own torchrun script (`import rankzero`): five calls, any rank.

    rankzero.log(step, {"train/loss": loss})      every rank; tensors averaged across ranks, rank 0 writes
    rankzero.progress(step, total_steps)          progress and ETA in the UI and the CLI (call it on every
                                                  rank: the page then says which rank is stuck)
    with rankzero.rank_work(): ...                around a step's own work (data, forward): the page says
                                                  which rank is slower than the others
    rankzero.save_checkpoint(state, step)         rank 0 writes it atomically; listed, downloadable, pruned
    rankzero.load_checkpoint(map_location=...)    the newest checkpoint of this job (after a restart), else the
                                                  one it was resumed from (`rankzero resume`), or None
    rankzero.should_stop()                        True on every rank once the job is being stopped;
                                                  save and `sys.exit(rankzero.EXIT_STOPPED)`
    rankzero.flush()                              every rank: write what `log` holds back (it averages
                                                  blocks of steps in one all-reduce; teardown and exit
                                                  flush by themselves)

In the service the worker sets RANKZERO_RUN_DIR (and the rest of `rankzero.env`). Run by hand
without it ("local mode") the script works unchanged: log and progress drop their values,
save_checkpoint writes nothing and returns None, load_checkpoint returns None, and should_stop
is True only after a SIGTERM. Events go through the one writer the built-in trainer uses
(`trainer.events`), in the events.jsonl format of docs/ARCHITECTURE.md.

Importing the package or `rankzero.env` imports no torch (the worker reads `rankzero.env`); the
calls import it on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from rankzero._service import service_names

with service_names():  # the service's `trainer`, even where the project has a trainer.py of its own
    from trainer.exit_codes import EXIT_OK, EXIT_STOPPED

_CALLS = {
    "log": "rankzero._metrics",
    "flush": "rankzero._metrics",
    "progress": "rankzero._progress",
    "save_checkpoint": "rankzero._checkpoints",
    "load_checkpoint": "rankzero._checkpoints",
    "UnsafeCheckpointError": "rankzero._checkpoints",
    "should_stop": "rankzero._stop",
    "params": "rankzero._params",  # the job's spec `params` (sweeps)
    "rank_work": "rankzero._ranks",  # this rank's own work in a step (which rank is slow)
}

if TYPE_CHECKING:  # the lazy names, for type checkers and editors (at run time __getattr__ imports them)
    from rankzero._checkpoints import UnsafeCheckpointError, load_checkpoint, save_checkpoint
    from rankzero._metrics import flush, log
    from rankzero._params import params
    from rankzero._progress import progress
    from rankzero._ranks import rank_work
    from rankzero._stop import should_stop

__all__ = [  # the same names as _CALLS (tests/sdk check it), spelled out so a type checker can read them
    "EXIT_OK",
    "EXIT_STOPPED",
    "job",
    "log",
    "flush",
    "progress",
    "save_checkpoint",
    "load_checkpoint",
    "UnsafeCheckpointError",
    "should_stop",
    "params",
    "rank_work",
]


def job() -> Any:
    """This process's job (`rankzero.env.JobEnv`: run_dir, job_id, attempt, datasets_dir, resume_from, world_size,
    accumulation_steps, …); run_dir None = local."""
    from rankzero import env

    return env.read()


def __getattr__(name: str) -> Any:
    if name == "env":
        return importlib.import_module("rankzero.env")
    module = _CALLS.get(name)
    if module is None:
        raise AttributeError(f"module 'rankzero' has no attribute {name!r}")
    with service_names():
        value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_CALLS) | {"env"})
