"""Checkpoints: the payload's keys (`TrainingState`, `pack`, `unpack`), atomic writes, retention,
and loading with `torch.load(weights_only=True)`.

A checkpoint is a dict of tensors and plain Python values only (RNG states are uint8 tensors),
so the safe loader reads it; its keys are `TrainingState`'s fields, in that order:
    model, optimizer, scheduler, scaler, step, epoch, rng, world_size, global_batch_size,
    num_train_samples, spec (JSON text)
"""

from __future__ import annotations

import hashlib
import io
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch

from trainer.run_dir import CHECKPOINT_NAME, RunDir


@dataclass(frozen=True)
class TrainingState:
    """Everything a run needs to continue exactly where it stopped; one field per checkpoint key."""

    model: dict[str, Any]  # the unwrapped module's state_dict (no "module." prefix)
    optimizer: dict[str, Any]
    scheduler: dict[str, Any]
    scaler: dict[str, Any]
    step: int  # optimizer steps done
    epoch: int
    rng: list[dict[str, torch.Tensor]]  # one `capture_rng` per rank, rank order
    world_size: int
    global_batch_size: int
    num_train_samples: int
    spec: str  # the job spec, JSON


def pack(state: TrainingState) -> dict[str, Any]:
    """The dict written to disk: `TrainingState`'s fields as keys, in declaration order (no copies)."""
    return {f.name: getattr(state, f.name) for f in fields(TrainingState)}


def unpack(payload: dict[str, Any]) -> TrainingState:
    """The state of a loaded checkpoint (`load`); a missing key raises KeyError naming it."""
    return TrainingState(
        model=payload["model"],
        optimizer=payload["optimizer"],
        scheduler=payload["scheduler"],
        scaler=payload["scaler"],
        step=int(payload["step"]),
        epoch=int(payload.get("epoch", 0)),
        rng=payload["rng"],
        world_size=int(payload["world_size"]),
        global_batch_size=int(payload["global_batch_size"]),
        num_train_samples=int(payload["num_train_samples"]),
        spec=payload.get("spec", ""),
    )


@dataclass(frozen=True)
class SavedCheckpoint:
    path: Path
    bytes: int
    sha256: str


def capture_rng(device: torch.device) -> dict[str, torch.Tensor]:
    """This process's RNG state (CPU and, on a GPU, its device) as tensors."""
    state = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def restore_rng(state: dict[str, torch.Tensor], device: torch.device) -> None:
    torch.set_rng_state(state["cpu"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


class CheckpointWriteError(OSError):
    """Saving a checkpoint failed; the message names the previous checkpoint, which is intact."""

    def __init__(self, path: Path, cause: OSError) -> None:
        earlier = [p for p in sorted(path.parent.glob("step_*.pt")) if p != path]
        kept = (
            f"the previous checkpoint {earlier[-1].name} is intact and still the latest"
            if earlier
            else "no earlier checkpoint exists"
        )
        super().__init__(
            cause.errno, f"could not save checkpoint {path.name} ({cause.strerror or cause}) in {path.parent}: {kept}"
        )


def write_atomic(path: Path, payload: dict[str, Any]) -> SavedCheckpoint:
    """Serialize, write to a temp name, fsync, rename over `path`, fsync the folder: a reader sees the
    old file or the whole new one, never half of one, even across a power cut."""
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    data = buffer.getbuffer()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:  # e.g. disk full: the half-written temp file goes, the previous checkpoint stays
        tmp.unlink(missing_ok=True)
        raise CheckpointWriteError(path, exc) from exc
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return SavedCheckpoint(path, len(data), hashlib.sha256(data).hexdigest())


def list_checkpoints(run_dir: RunDir) -> list[tuple[int, Path]]:
    """(step, path) of every finished checkpoint in the run, oldest first."""
    if not run_dir.checkpoints.is_dir():
        return []
    found = []
    for p in run_dir.checkpoints.iterdir():
        m = CHECKPOINT_NAME.match(p.name)
        if m:
            found.append((int(m.group(1)), p))
    return sorted(found)


def prune(run_dir: RunDir, keep_last: int) -> list[Path]:
    """Delete all but the newest `keep_last` checkpoints; returns what was deleted."""
    old = list_checkpoints(run_dir)[:-keep_last]
    for _, p in old:
        p.unlink(missing_ok=True)
    return [p for _, p in old]


def load(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"resume_from {str(p)!r} does not exist; point it at a checkpoints/step_*.pt file")
    return torch.load(p, map_location="cpu", weights_only=True)
