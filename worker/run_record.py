"""What a job's run directory holds, read by the worker (no torch): events.jsonl is the durable record.

- `catch_up`: before an attempt launches, ingest whatever events.jsonl holds that the database does not
  (an earlier supervisor died or froze before writing it: checkpoints, points, its `stopped` event).
- `newest_intact_checkpoint`: the newest `checkpoints/step_*.pt` on disk whose bytes match the sha256 its
  `checkpoint` event (or its row) recorded; a file no event vouches for, or a torn one, is passed over
  (the one rule, trainer/checkpoint_files.py, fed with the database's records too).
- `hole_in_record`: why a run that is about to be called a success is not whole (run dir gone, events
  missing, no `finished`, a seq gap from an event the trainer could not write, the final checkpoint gone).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlmodel import Session, col

from core import run_files
from core.tables import Checkpoint
from trainer import checkpoint_files
from trainer.event_types import EventType
from trainer.run_dir import RunDir
from worker.ingest import Ingestor
from worker.ingest_events import EventTail


def read_events(run: RunDir) -> Iterator[dict[str, Any]]:
    """Every complete, parseable event line of the run's events.jsonl, in file order."""
    tail = EventTail(run.events)
    while batch := tail.read():
        yield from batch


def catch_up(engine: Engine, job_id: int, run: RunDir, attempt: int) -> int:
    """Ingest what events.jsonl already holds (already-ingested seqs are skipped); returns how many
    metric points were new. Fenced by `attempt` (core.jobs.FencedOut when the row moved on)."""
    ingestor = Ingestor(engine, job_id, run.root, attempt=attempt)
    new = 0
    tail = EventTail(run.events)
    while batch := tail.read():
        new += ingestor.ingest(batch)
    return new


def _recorded_shas(engine: Engine, job_id: int, run: RunDir) -> dict[str, str]:
    """checkpoint path (relative to the run dir) → the sha256 recorded for it (events, then rows)."""
    shas: dict[str, str] = {}
    with Session(engine) as s:
        shas_read = select(col(Checkpoint.path), col(Checkpoint.sha256)).where(col(Checkpoint.job_id) == job_id)
        for path, sha in s.execute(shas_read):
            if sha:
                shas[str(path)] = str(sha)
    shas.update(checkpoint_files.recorded_shas(run))  # the event, written with the file, has the last word
    return shas


def newest_intact_checkpoint(engine: Engine, job_id: int, run: RunDir) -> Path | None:
    """The newest checkpoint file on disk that matches its recorded sha256 (None: none does)."""
    if not checkpoint_files.list_checkpoints(run):
        return None
    return checkpoint_files.newest_intact(run, _recorded_shas(engine, job_id, run))


def _seq_gaps(events: list[dict[str, Any]]) -> list[tuple[int, int]]:
    gaps, prev = [], None
    for ev in events:
        seq = ev["seq"]
        if prev is not None and seq > prev + 1:
            gaps.append((prev + 1, seq - 1))
        prev = seq if prev is None else max(prev, seq)
    return gaps


def _final_checkpoint_problem(run: RunDir, events: list[dict[str, Any]]) -> str | None:
    last = next((e for e in reversed(events) if e.get("type") == EventType.checkpoint), None)
    if last is None or not isinstance(last.get("path"), str):
        return None
    path = run.root / last["path"]
    if not path.is_file():
        return f"its final checkpoint {last['path']} is missing"
    try:
        sha = run_files.sha256(path, run.root) if last.get("sha256") else None
    except OSError:
        return f"its final checkpoint {last['path']} is not a file of its run dir"
    if sha is not None and sha != last["sha256"]:
        return f"its final checkpoint {last['path']} does not match the sha256 recorded for it"
    return None


def hole_in_record(run: RunDir, expect_finished: bool) -> str | None:
    """Why the run's record is not whole (None: it is). `expect_finished`: the built-in trainer always
    writes a `finished` event before it exits 0; a script job may write no events at all."""
    if not run.root.is_dir():
        return "the job's run directory was deleted while the job ran: its events and checkpoints are lost"
    if not run.events.is_file():
        if expect_finished:
            return f"{run.events.name} is missing from the run directory (deleted while the job ran?)"
        return None
    events = list(read_events(run))
    # The built-in trainer writes every seq it takes; the SDK may drop an event whose values failed.
    gaps = _seq_gaps(events) if expect_finished else []
    if gaps:
        where = ", ".join(f"{a}" if a == b else f"{a}–{b}" for a, b in gaps[:5])
        return (
            f"events with seq {where} were never written to {run.events.name} (disk full, or the file was "
            "unwritable): the job's record has a hole"
        )
    if expect_finished and not any(e.get("type") == EventType.finished for e in events):
        return f"the trainer exited 0 but wrote no `finished` event to {run.events.name} (run directory unwritable?)"
    return _final_checkpoint_problem(run, events)


LOW_SPACE_BYTES = 1 << 20


def run_dir_trouble(run: RunDir) -> str | None:
    """A reason a failed attempt's files could not be written: the run dir gone, or its disk full."""
    if not run.root.is_dir():
        return "the job's run directory was deleted while the job ran"
    try:
        st = os.statvfs(run.root)
    except OSError as exc:
        return f"the job's run directory is unreadable ({exc.strerror or exc})"
    free = st.f_bavail * st.f_frsize
    if free < LOW_SPACE_BYTES:
        return f"the run directory's file system is full ({free} bytes free; No space left on device)"
    return None
