"""Turning an exception into something a person can act on: a per-rank note and rank 0's `failed` event.

Only rank 0 writes events.jsonl, but the rank that fails first is often another one (rank 0 then
sees a closed connection). So every failing rank first writes a small note naming itself; rank 0
waits briefly for notes and reports the earliest, i.e. the root cause rather than its echo.
"""

from __future__ import annotations

import json
import os
import time
import traceback
from pathlib import Path

from trainer.event_types import Envelope, EventType, Failed
from trainer.events import EventLog, last_seq
from trainer.run_dir import failure_note

TRACEBACK_LINES = 30
NOTE_WAIT_S = 2.0
FALLBACK_WAIT_S = 5.0


def traceback_tail(exc: BaseException) -> str:
    lines = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).splitlines()
    return "\n".join(lines[-TRACEBACK_LINES:])


def write_note(root: Path, rank: int, exc: BaseException) -> dict:
    note = {
        "rank": getattr(exc, "rank", rank),  # a NonFiniteLoss names the rank whose loss blew up
        "reporting_rank": rank,
        "time": time.time(),
        "error": f"{type(exc).__name__}: {exc}",
        "traceback": traceback_tail(exc),
    }
    path = failure_note(root, rank)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps(note))
        os.replace(tmp, path)
    except OSError:
        pass  # the note is a courtesy; never mask the real error
    return note


def _earliest_note(root: Path, own: dict, world_size: int, since: float) -> dict:
    deadline = time.monotonic() + (NOTE_WAIT_S if world_size > 1 else 0.0)
    notes = [own]
    while True:
        notes = [own]
        for r in range(1, world_size):
            try:
                note = json.loads(failure_note(root, r).read_text())
            except (OSError, ValueError):
                continue
            if note.get("time", 0) >= since:  # ignore notes an earlier attempt left behind
                notes.append(note)
        if len(notes) == world_size or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    return min(notes, key=lambda n: n["time"])


def report_failure(root: Path, rank: int, world_size: int, exc: BaseException, events: EventLog, since: float) -> None:
    """Write this rank's note; on rank 0 also the `failed` event (the earliest failing rank's error)."""
    own = write_note(root, rank, exc)
    if rank != 0:
        _fallback_failed_event(root, own, since)
        return
    first = _earliest_note(root, own, world_size, since)
    events.emit(EventType.failed, error=first["error"], rank=first["rank"], traceback=first["traceback"])


class _FailedLine(Envelope, Failed):
    """A `failed` line as this module writes it itself (the contract: trainer/event_types.py)."""


def _fallback_failed_event(root: Path, note: dict, since: float) -> None:
    """Rank 0 normally reports a peer's failure, but gloo may abort rank 0's process outright when a
    peer's connection drops, and then nobody would. So a failing rank ≠ 0 waits (which also keeps
    torchrun from tearing rank 0 down meanwhile) for rank 0's `failed` event, and appends one itself
    when none comes. One write() of a whole line to a file opened for append: no torn lines."""
    path = root / "events.jsonl"
    deadline = time.monotonic() + FALLBACK_WAIT_S
    while time.monotonic() < deadline:
        if _has_failed_event(path, since):
            return
        time.sleep(0.1)
    event: _FailedLine = {
        "seq": last_seq(path) + 1,
        "time": time.time(),
        "type": EventType.failed.value,
        "error": note["error"],
        "rank": note["rank"],
        "traceback": note["traceback"],
    }
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(event) + "\n").encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def _has_failed_event(path: Path, since: float) -> bool:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return False
    for line in reversed(lines[-50:]):
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("type") == EventType.failed.value and event.get("time", 0) >= since:
            return True
    return False
