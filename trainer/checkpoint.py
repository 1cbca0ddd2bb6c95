"""Checkpoints: the payload's keys (`TrainingState`, `pack`, `unpack`), atomic writes, retention,
and loading with `torch.load(weights_only=True)`.

A checkpoint is a dict of tensors and plain Python values only (RNG states are uint8 tensors),
so the safe loader reads it; its keys are `TrainingState`'s fields, in that order:
    model, optimizer, scheduler, scaler, step, epoch, rng, world_size, global_batch_size,
    num_train_samples, spec (JSON text)
"""

from __future__ import annotations

import copy as copy_module
import hashlib
import io
import os
import threading
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch

from trainer.checkpoint_files import list_checkpoints
from trainer.run_dir import RunDir


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
        earlier = [p for _, p in list_checkpoints(RunDir(path.parent.parent)) if p != path]
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


# ------------------------------------------------------------------------------------ async saving
def snapshot(obj: Any, reuse: dict[tuple[int, int], torch.UntypedStorage] | None = None) -> Any:
    """A host copy of `obj` (nested dicts / lists / tuples of tensors and plain values) that later
    training cannot change: each tensor storage is copied to the CPU once, and every tensor becomes the
    same view of its copy, so `torch.save` of the snapshot writes what it would have written of `obj`
    (same storages, same sharing, byte for byte on CPU). This is all a step waits for.

    `reuse`: host buffers of an earlier snapshot nobody reads any more (keyed by source storage and
    size), copied into instead of allocated (4× faster on CPU: no fresh pages to fault in); it is
    replaced by this snapshot's buffers."""
    memo: dict[tuple[int, int], torch.UntypedStorage] = {}
    with torch.no_grad():
        out = _snap(obj, memo, reuse or {})
    if reuse is not None:
        reuse.clear()
        reuse.update(memo)
    return out


def _snap(obj: Any, memo: dict[tuple[int, int], torch.UntypedStorage], spare: dict) -> Any:
    if isinstance(obj, torch.Tensor):
        storage = obj.untyped_storage()
        key = (storage._cdata, storage.nbytes())  # _cdata: what torch.save tells storages apart by
        copy = memo.get(key)
        if copy is None:
            copy = spare.pop(key, None)
            if copy is None:
                copy = torch.UntypedStorage(storage.nbytes(), device="cpu")
            copy.copy_(storage)
            memo[key] = copy
        return torch.empty(0, dtype=obj.dtype).set_(copy, obj.storage_offset(), obj.size(), obj.stride())
    if isinstance(obj, dict):
        out = type(obj)((k, _snap(v, memo, spare)) for k, v in obj.items())
        if getattr(obj, "__dict__", None):  # a state_dict's `_metadata` (module versions)
            out.__dict__.update(copy_module.deepcopy(obj.__dict__))
        return out
    if isinstance(obj, (list, tuple)):
        return type(obj)(_snap(v, memo, spare) for v in obj)
    return copy_module.deepcopy(obj)


class AsyncCheckpointWriter:
    """Serializes, writes (`write_atomic`: temp name, fsync, rename, sha256) and prunes on a background
    thread, so the training step only waits for `snapshot`. At most one save is in flight: `submit`
    waits for the previous one first, then snapshots into its host buffers (kept between saves: one
    host copy of the state stays allocated). A finished save is handed back by `poll` / `wait` on the
    caller's thread (which emits its event), a failed one is raised there, so nothing is recorded for
    a file that was not written and the run fails as a synchronous save would have."""

    def __init__(self, run_dir: RunDir, keep_last: int) -> None:
        self.run_dir, self.keep_last = run_dir, keep_last
        self._thread: threading.Thread | None = None
        self._result: SavedCheckpoint | None = None
        self._error: BaseException | None = None
        self._meta: Any = None
        self._buffers: dict[tuple[int, int], torch.UntypedStorage] = {}

    @property
    def in_flight(self) -> bool:
        return self._thread is not None

    def submit(self, path: Path, payload: dict[str, Any], meta: Any = None) -> list[tuple[SavedCheckpoint, Any]]:
        """Snapshot `payload` (live tensors are fine: nothing is read from them after this returns) and
        start saving it to `path`. Returns the previous save if it had to be waited for (its event is
        still to emit); raises its error if it failed."""
        done = self.wait()
        payload = snapshot(payload, self._buffers)
        self._meta = meta
        self._thread = threading.Thread(target=self._write, args=(path, payload), name="checkpoint-writer")
        self._thread.start()
        return done

    def _write(self, path: Path, payload: dict[str, Any]) -> None:
        try:
            self._result = write_atomic(path, payload)
            prune(self.run_dir, self.keep_last)
        except BaseException as exc:  # handed to the training thread by poll / wait
            self._error = exc

    def poll(self) -> list[tuple[SavedCheckpoint, Any]]:
        """[(saved, meta)] when the save in flight has finished since the last call, else []; raises
        the save's error if it failed. Costs one attribute read while a save is running."""
        if self._thread is None or self._thread.is_alive():
            return []
        return self.wait()

    def wait(self) -> list[tuple[SavedCheckpoint, Any]]:
        """Wait for the save in flight (if any): [(saved, meta)], or its error raised."""
        if self._thread is None:
            return []
        self._thread.join()
        self._thread = None
        error, result, meta = self._error, self._result, self._meta
        self._error = self._result = self._meta = None
        if error is not None:
            raise error
        assert result is not None
        return [(result, meta)]
