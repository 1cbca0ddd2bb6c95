"""The events rank 0 writes to events.jsonl, declared once: the trainer emits these, the worker's
ingester dispatches on them (docs/ARCHITECTURE.md, "events.jsonl"). Torch-free.

To add an event type: a member here, a TypedDict for its fields, and a handler in
`worker/ingest.py`'s table (the ingester refuses to start with a type it has no handler for).
"""

from __future__ import annotations

from enum import Enum
from typing import TypedDict


class EventType(str, Enum):
    started = "started"
    progress = "progress"
    metric = "metric"
    checkpoint = "checkpoint"
    stopped = "stopped"
    finished = "finished"
    failed = "failed"


class Started(TypedDict, total=False):
    world_size: int
    nproc: int
    nnodes: int
    strategy: str
    device: str
    backend: str
    precision: str
    total_steps: int
    global_batch_size: int
    start_step: int
    resumed_from: str | None
    # Optional (the built-in trainer's): seconds since the rank's process started at the end of each
    # start-up phase: {"imports", "rendezvous", "data", "build"} (trainer/startup.py).
    startup: dict[str, float]


class Progress(TypedDict, total=False):
    step: int
    total_steps: int
    epoch: int
    samples: int
    samples_per_s: float
    eta_s: float | None
    # Optional, in the built-in trainer's first progress event of an attempt: seconds from process
    # start to the end of the first optimizer step (with `compile: true`, compilation included).
    first_step_s: float


class Metric(TypedDict):
    step: int
    name: str
    value: float


class CheckpointSaved(TypedDict):
    step: int
    epoch: int
    path: str  # relative to the run dir
    bytes: int
    sha256: str


class Stopped(TypedDict, total=False):
    step: int
    checkpoint: str | None
    reason: str


class Finished(TypedDict):
    step: int


class Failed(TypedDict, total=False):
    error: str
    rank: int | None
    traceback: list[str]
