"""trainer/event_types.py is the one contract for events: the ingester handles every type it
declares, the job row keeps every JobProgress field the SSE stream sends, and what the trainer's
writer puts on a line is the envelope plus the type's declared fields (no database, no torch)."""

from __future__ import annotations

import json

import pytest

from core.tables import Job
from trainer.event_types import FIELDS, PROGRESS_COUNTS, PROGRESS_RATES, Envelope, EventType, JobProgress
from trainer.events import EventLog
from worker.ingest_handlers import HANDLERS


def test_every_event_type_has_fields_and_a_handler() -> None:
    assert set(FIELDS) == set(EventType) == set(HANDLERS)


def test_job_progress_fields_are_job_columns_and_split_by_kind() -> None:
    columns = set(Job.model_fields)
    assert set(JobProgress.__annotations__) <= columns
    assert list(JobProgress.__annotations__) == [*PROGRESS_COUNTS, *PROGRESS_RATES]  # the stream's key order


SAMPLES = {
    EventType.started: {"world_size": 2, "nproc": 2, "nnodes": 1, "strategy": "ddp", "device": "cpu",
                        "backend": "gloo", "precision": "fp32", "total_steps": 10, "global_batch_size": 8,
                        "start_step": 0, "resumed_from": None},
    EventType.progress: {"step": 1, "total_steps": 10, "epoch": 0, "samples": 8, "samples_per_s": 1.5, "eta_s": 6.0},
    EventType.metric: {"step": 1, "name": "train/loss", "value": 0.5},
    EventType.checkpoint: {"step": 1, "epoch": 0, "path": "checkpoints/step_00000001.pt", "bytes": 3, "sha256": "ab"},
    EventType.stopped: {"step": 1, "checkpoint": "checkpoints/step_00000001.pt", "reason": "SIGTERM"},
    EventType.finished: {"step": 10},
    EventType.failed: {"error": "boom", "rank": 1, "traceback": ["line"]},
}  # fmt: skip


@pytest.mark.parametrize("kind", list(EventType), ids=[t.value for t in EventType])
def test_a_line_is_the_envelope_and_the_declared_fields(tmp_path, kind: EventType) -> None:
    fields = SAMPLES[kind]
    assert set(fields) <= set(FIELDS[kind].__annotations__)
    log = EventLog(tmp_path / "events.jsonl")
    log.emit(kind, **fields)  # type: ignore[call-overload]  # one call for every kind
    log.close()
    (line,) = [json.loads(x) for x in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert set(line) == set(Envelope.__annotations__) | set(fields)
    assert line["type"] == kind.value and line["seq"] == 1 and {k: line[k] for k in fields} == fields


def test_a_line_that_never_ends_is_dropped_and_the_tail_stays_bounded(tmp_path) -> None:
    from worker.ingest_events import MAX_EVENT_LINE, EventTail

    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"seq": 1, "type": "progress", "step": 1}\n')
    tail = EventTail(path)
    assert [e["seq"] for e in tail.read()] == [1]
    with path.open("ab") as fh:  # 3 MiB of one line, read in 1 MiB chunks
        for _ in range(3):
            fh.write(b"x" * MAX_EVENT_LINE)
            fh.flush()
            assert tail.read(max_bytes=MAX_EVENT_LINE) == []
            assert len(tail._partial) <= MAX_EVENT_LINE
        fh.write(b'tail of the long line\n{"seq": 2, "type": "progress", "step": 2}\n')
    assert [e["seq"] for e in tail.read()] == [2]
    assert tail.overlong_lines == 1
    # Complete lines read together with the start of an overlong one are kept.
    with path.open("ab") as fh:
        fh.write(b'{"seq": 3, "type": "progress", "step": 3}\n' + b"y" * (MAX_EVENT_LINE + 1))
    assert [e["seq"] for e in tail.read()] == [3]
    assert tail.overlong_lines == 2
