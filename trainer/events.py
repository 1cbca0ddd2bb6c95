"""events.jsonl: rank 0's append-only event log (contract in docs/ARCHITECTURE.md).

The training loop only builds a dict and puts it on a queue; a background thread does the JSON
encoding, the write and the per-line flush, so a slow disk never stalls an optimizer step.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from pathlib import Path
from typing import Any

from trainer.event_types import EventType

_STOP = object()


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


class EventLog:
    """Writes events with a strictly increasing `seq` and a unix `time`; `enabled=False` (ranks ≠ 0) drops them."""

    def __init__(self, path: Path, enabled: bool = True) -> None:
        self.path = path
        self.enabled = enabled
        self._seq = 0
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        if enabled:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._seq = last_seq(path)
            self._file = path.open("a", encoding="utf-8")
            self._thread = threading.Thread(target=self._drain, name="events-writer", daemon=True)
            self._thread.start()

    def emit(self, type_: EventType, **fields: Any) -> None:
        """Queue one event; on disk its `type` is the member's plain string value (e.g. "metric")."""
        if not self.enabled:
            return
        self._seq += 1
        self._queue.put({"seq": self._seq, "time": time.time(), "type": EventType(type_).value, **fields})

    def _drain(self) -> None:
        while True:
            event = self._queue.get()
            if event is _STOP:
                return
            try:
                self._file.write(json.dumps(event, allow_nan=False, default=str) + "\n")
                self._file.flush()
            except (OSError, ValueError) as exc:  # keep draining: one bad value must not lose later events
                self._error = exc

    def close(self) -> None:
        """Write everything queued, then close. Safe to call twice."""
        if self._thread is None:
            return
        self._queue.put(_STOP)
        self._thread.join(timeout=30)
        self._thread = None
        self._file.close()
