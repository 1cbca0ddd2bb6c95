"""`rankzero.save_checkpoint` / `load_checkpoint`: the job's checkpoints, in the run directory.

Same names (`checkpoints/step_XXXXXXXX.pt`), same atomic writer, same `checkpoint` event and the
same keep-last pruning as the built-in trainer, so the service lists them, serves them for
download and finds them again after a restart or the loss of a host.

`save_checkpoint` is rank 0's alone and holds no collective: a script may call it on every rank or
only under `if rank == 0:` (a barrier inside would hang the second kind). A script whose other ranks
must read the file right away adds its own `dist.barrier()` after the save.

Outside the service (no RANKZERO_RUN_DIR) both are no-ops: nothing is written to the working
directory; set RANKZERO_RUN_DIR=./some_dir to try the full behaviour by hand.
"""

from __future__ import annotations

import operator
import pickle
import sys
import zipfile
from pathlib import Path
from typing import Any

import torch

from rankzero import _runtime
from trainer import checkpoint as ckpt_io
from trainer import checkpoint_files
from trainer.event_types import EventType
from trainer.run_dir import RunDir

# What a torn or damaged file raises from torch.load (zip reader, unpickler, short read).
_DAMAGED = (RuntimeError, EOFError, OSError, ValueError, zipfile.BadZipFile, pickle.UnpicklingError)


class UnsafeCheckpointError(pickle.UnpicklingError):
    """The checkpoint holds objects `torch.load(weights_only=True)` refuses to build."""


def save_checkpoint(obj: Any, step: int, *, epoch: int | None = None) -> Path | None:
    """Rank 0 writes `obj` (anything `torch.save` takes; prefer tensors, dicts, lists and numbers so
    `load_checkpoint` reads it safely) as the checkpoint of `step`, records it and prunes old ones
    (RANKZERO_KEEP_LAST, default 3). Returns the file's path on rank 0; None elsewhere and locally."""
    step = operator.index(step)
    job = _runtime.job()
    events = _runtime.events()
    if job.run_dir is None or events is None:  # local mode, or a rank other than 0
        return None
    run = RunDir(job.run_dir)
    path = run.checkpoint_path(step)
    saved = ckpt_io.write_atomic(path, obj)
    events.emit(
        EventType.checkpoint,
        step=step,
        epoch=None if epoch is None else operator.index(epoch),
        path=checkpoint_files.relative_name(run, path),
        bytes=saved.bytes,
        sha256=saved.sha256,
    )
    # The event is what vouches for the file ("newest intact": trainer/checkpoint_files.py): on disk
    # before the save returns, so a rank killed right after it (a stop's save, then exit) loses nothing.
    events.flush()
    ckpt_io.prune(run, job.keep_last)
    return path


def _load(path: Path, map_location: Any, weights_only: bool) -> Any:
    try:
        return torch.load(path, map_location=map_location, weights_only=weights_only)
    except pickle.UnpicklingError as exc:
        if weights_only and "weights only" in str(exc).lower():
            raise UnsafeCheckpointError(
                f"{path.name} holds objects that torch.load(weights_only=True) does not build: {exc}. "
                "Save tensors, dicts, lists and numbers (e.g. model.state_dict()), allow the class with "
                "torch.serialization.add_safe_globals, or pass weights_only=False (runs arbitrary "
                "pickled code: only for files this job wrote itself)"
            ) from exc
        raise


def load_checkpoint(map_location: Any = None, *, weights_only: bool = True) -> Any | None:
    """The newest intact checkpoint of this job (what an earlier attempt saved); before the job has saved
    one of its own, the checkpoint it was started from (spec `resume_from`: `rankzero resume JOB
    --checkpoint STEP`, "Resume from here", RANKZERO_RESUME_FROM); else None (or local mode). Intact is
    the service's one rule (trainer/checkpoint_files.py): the file's bytes match the sha256 its
    `checkpoint` event recorded, the checkpoint the worker would resume from. A file that fails that, or
    does not load, is skipped for the one before it, with a warning. Any rank may call it (each reads
    the file); `map_location` as for `torch.load`."""
    job = _runtime.job()
    if job.run_dir is None:  # local mode
        _runtime.notice_local()
        return None
    run = RunDir(job.run_dir)
    recorded = checkpoint_files.recorded_shas(run)
    passed_over: list[tuple[Path, str]] = []
    for path in checkpoint_files.intact_newest_first(run, recorded, passed_over=passed_over):
        _warn_passed_over(passed_over)
        try:
            return _load(path, map_location, weights_only)
        except UnsafeCheckpointError:
            raise
        except _DAMAGED as exc:
            print(f"rankzero: skipping checkpoint {path.name}, which does not load: {exc}", file=sys.stderr)
    _warn_passed_over(passed_over)
    if job.resume_from is not None:
        # The API confined it to the runs dir and matched it to a recorded checkpoint at submit; it is
        # the one file of another run the job's sandbox shows (read-only).
        return _load(job.resume_from, map_location, weights_only)
    return None


def _warn_passed_over(passed_over: list[tuple[Path, str]]) -> None:
    for path, why in passed_over:
        print(f"rankzero: skipping checkpoint {path.name}: {why}", file=sys.stderr)
    passed_over.clear()
