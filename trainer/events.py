"""events.jsonl: rank 0's append-only event log (contract in docs/ARCHITECTURE.md).

The one event writer: the built-in trainer and the SDK (`rankzero.log`, `progress`, `save_checkpoint`)
both write through `EventLog`. The training loop only builds a dict and puts it on a queue; a
background thread does the JSON encoding, the write and the per-line flush, so a slow disk never
stalls an optimizer step. `emit_later` goes one further for values still being computed (a metric
on a GPU, an all-reduce in flight): the writer thread produces the fields, so the caller never waits.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

from trainer.event_types import EventType

if TYPE_CHECKING:  # the fields of each event type: the contract in trainer/event_types.py
    from typing_extensions import Unpack

    from trainer.event_types import CheckpointSaved, Failed, Finished, Metric, Progress, Started, Stopped

_STOP = object()


class _Flushed:
    """A mark in the queue: set once everything queued before it is written (`EventLog.flush`)."""

    def __init__(self) -> None:
        self.done = threading.Event()


# An event line that cannot be written (disk full, a quota) is retried this long before it is given up;
# the worker then fails the job over the gap in `seq` (worker/run_record.py), never calls it whole.
WRITE_RETRY_S = 20.0


def last_seq(path: Path) -> int:
    """The highest `seq` already in `path` (0 when absent), so a resumed run continues the numbering.
    A torn last line (a crash mid-write) is skipped."""
    if not path.exists():
        return 0
    best = 0
    with path.open("rb") as f:
        for line in f:
            try:
                best = max(best, int(json.loads(line)["seq"]))
            except (ValueError, KeyError, TypeError):
                continue
    return best


def _ends_with_newline(path: Path) -> bool:
    with path.open("rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


class _Later:
    """`count` events whose fields are computed on the writer thread (`EventLog.emit_later`)."""

    def __init__(
        self, first: int, count: int, head: dict[str, Any], fields: Callable[[], Sequence[Mapping[str, object]]]
    ) -> None:
        self.first, self.count, self.head, self.fields = first, count, head, fields

    def events(self, log: EventLog) -> list[dict[str, Any]]:
        try:
            produced = self.fields()
            if len(produced) != self.count:
                raise ValueError(f"expected {self.count} events, got {len(produced)}")
        except Exception as exc:  # the writer thread must outlive any one bad value
            log._error = exc
            print(f"events: {self.count} events not written: {exc!r}", file=sys.stderr)
            return []
        return [{"seq": self.first + i, **self.head, **f} for i, f in enumerate(produced)]


class EventLog:
    """Writes events with a strictly increasing `seq` and a unix `time`; `enabled=False` (ranks ≠ 0) drops them.

    `linger_s` > 0: after waking for an event the writer waits that long and writes everything queued
    by then, so an event logged every step costs one writer wake-up per `linger_s`, not one per event
    (each wake-up takes the GIL from the training loop). 0 (the trainer's): each event as it comes.
    """

    def __init__(self, path: Path, enabled: bool = True, linger_s: float = 0.0) -> None:
        self.path = path
        self.enabled = enabled
        self.linger_s = linger_s
        self._seq = 0
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._hurry = threading.Event()  # ends a linger at once (close, flush)
        self._gave_up = False  # the last line could not be written within WRITE_RETRY_S
        if enabled:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._seq = last_seq(path)
            self._file = path.open("a", encoding="utf-8")
            if self._file.tell() and not _ends_with_newline(path):  # a line torn by a full disk or a crash
                os.write(self._file.fileno(), b"\n")  # ends it, so our first line is not glued to it
            self._thread = threading.Thread(target=self._drain, name="events-writer", daemon=True)
            self._thread.start()

    # One signature per event type: the type checker holds every emit site to its TypedDict.
    @overload
    def emit(self, type_: Literal[EventType.started], **fields: Unpack[Started]) -> None: ...
    @overload
    def emit(self, type_: Literal[EventType.progress], **fields: Unpack[Progress]) -> None: ...
    @overload
    def emit(self, type_: Literal[EventType.metric], **fields: Unpack[Metric]) -> None: ...
    @overload
    def emit(self, type_: Literal[EventType.checkpoint], **fields: Unpack[CheckpointSaved]) -> None: ...
    @overload
    def emit(self, type_: Literal[EventType.stopped], **fields: Unpack[Stopped]) -> None: ...
    @overload
    def emit(self, type_: Literal[EventType.finished], **fields: Unpack[Finished]) -> None: ...
    @overload
    def emit(self, type_: Literal[EventType.failed], **fields: Unpack[Failed]) -> None: ...

    def emit(self, type_: EventType, **fields: Any) -> None:
        """Queue one event; on disk its `type` is the member's plain string value (e.g. "metric")."""
        if not self.enabled:
            return
        self._seq += 1
        self._queue.put({"seq": self._seq, "time": time.time(), "type": EventType(type_).value, **fields})

    def emit_later(self, type_: Literal[EventType.metric], count: int, fields: Callable[[], list[Metric]]) -> None:
        """Queue `count` events of one type whose fields the writer thread computes: `fields()` runs
        there and returns one dict per event. `seq` and `time` are taken now, as by `emit`; if
        `fields()` raises or returns another count, those events are dropped (their seqs stay unused)."""
        if not self.enabled or count <= 0:
            return
        first, self._seq = self._seq + 1, self._seq + count
        head = {"time": time.time(), "type": EventType(type_).value}
        self._queue.put(_Later(first, count, head, fields))

    def _drain(self) -> None:
        while True:
            batch = [self._queue.get()]
            if self.linger_s > 0 and batch[0] is not _STOP and not isinstance(batch[0], _Flushed):
                self._hurry.wait(self.linger_s)
                while not self._queue.empty():
                    batch.append(self._queue.get())
            for event in batch:
                if event is _STOP:
                    return
                if isinstance(event, _Flushed):
                    self._hurry.clear()
                    event.done.set()
                    continue
                if isinstance(event, _Later):
                    for one in event.events(self):
                        self._write(one)
                else:
                    self._write(event)

    def _write(self, event: dict[str, Any]) -> None:
        try:
            line = json.dumps(event, allow_nan=False, default=str) + "\n"
        except ValueError as exc:  # keep draining: one bad value must not lose later events
            self._error = exc
            return
        self._append(line.encode("utf-8"))

    def _append(self, data: bytes) -> None:
        """Append one whole line straight to the file (O_APPEND, no buffer that could tear it), retrying a
        full disk for WRITE_RETRY_S; after one line was given up, later lines get one try until one succeeds."""
        deadline = time.monotonic() + (0.0 if self._gave_up else WRITE_RETRY_S)
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self._file.fileno(), view) :]
            except OSError as exc:
                if time.monotonic() >= deadline:
                    self._error, self._gave_up = exc, True
                    return
                time.sleep(0.25)
        self._gave_up = False

    def flush(self, timeout: float = WRITE_RETRY_S + 10) -> bool:
        """Wait until every event queued so far is written (or given up); False if `timeout` passed first.

        For the few events whose record must be on disk before the caller goes on: a checkpoint's,
        which is what vouches for its file (trainer/checkpoint_files.py), even if the process is
        killed right after the save."""
        if self._thread is None:
            return True
        mark = _Flushed()
        self._queue.put(mark)
        self._hurry.set()
        return mark.done.wait(timeout)

    def close(self) -> None:
        """Write everything queued, then close. Safe to call twice."""
        if self._thread is None:
            return
        self._queue.put(_STOP)
        self._hurry.set()
        self._thread.join(timeout=30)
        self._thread = None
        self._file.close()
