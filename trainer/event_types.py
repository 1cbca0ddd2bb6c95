"""The events rank 0 writes to events.jsonl, declared once (docs/ARCHITECTURE.md, "events.jsonl").
Torch-free.

This module is THE contract; the others derive from it instead of restating fields:
- the writer: `EventLog.emit(EventType.x, **fields)` is typed per type from the TypedDicts below
  (trainer/events.py), so the type checker holds the trainer's and the SDK's (rankzero/) emit sites to them;
- the worker's ingester (worker/ingest_handlers.py): a handler per member, each reading its event as its TypedDict
  (the ingester refuses to start with a type it has no handler for), progress columns from `JobProgress`;
- the API's SSE stream (api/routes/stream.py): its `progress` event is a `JobProgress`.

The wire format: one JSON object per line, the `Envelope` (seq, time, type) plus the type's fields.
To add an event type: a member here, a TypedDict for its fields (and its row in `FIELDS`), the emit site,
and a handler in `worker/ingest_handlers.py`'s table.
"""

from __future__ import annotations

from enum import Enum
from typing import Final, TypedDict


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


class Envelope(TypedDict):
    """What every line has besides its type's fields (EventLog adds it)."""

    seq: int  # strictly increasing; a resumed run continues after the file's last
    time: float  # unix seconds
    type: str  # an EventType's value


class JobProgress(TypedDict, total=False):
    """Where a job is: the progress fields a job row keeps (ingested from `progress` events) and the
    SSE stream's `progress` event carries."""

    step: int
    total_steps: int
    epoch: int
    samples: int
    samples_per_s: float | None
    eta_s: float | None


# JobProgress's fields by kind: counts are kept when they are ints; rates are floats, a non-finite one is None.
PROGRESS_COUNTS: Final = ("step", "total_steps", "epoch", "samples")
PROGRESS_RATES: Final = ("samples_per_s", "eta_s")


class Progress(JobProgress, total=False):
    # Optional, in the built-in trainer's first progress event of an attempt: seconds from process
    # start to the end of the first optimizer step (with `compile: true`, compilation included).
    first_step_s: float


class Metric(TypedDict):
    step: int
    name: str
    value: float | None  # None: the value was nan/inf (JSON has neither); the ingester skips it


class CheckpointSaved(TypedDict):
    step: int
    epoch: int | None  # None: a script's save_checkpoint without an epoch
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


# Each type's fields (the ingester's handlers and the tests read them from here).
FIELDS: Final[dict[EventType, type]] = {
    EventType.started: Started,
    EventType.progress: Progress,
    EventType.metric: Metric,
    EventType.checkpoint: CheckpointSaved,
    EventType.stopped: Stopped,
    EventType.finished: Finished,
    EventType.failed: Failed,
}
if set(PROGRESS_COUNTS + PROGRESS_RATES) != set(JobProgress.__annotations__):  # not assert: kept under -O
    raise RuntimeError("PROGRESS_COUNTS + PROGRESS_RATES must name JobProgress's fields")
if set(FIELDS) != set(EventType):
    raise RuntimeError(f"FIELDS has no TypedDict for {sorted(t.value for t in set(EventType) - set(FIELDS))}")
