"""Each metric point of events.jsonl is stored exactly once, whatever the worker lives through (issue 29 item 3).

The guarantee (worker/ingest.py): a batch's points and the job's `ingested_seq` (the offset a restarted
worker resumes from) commit in one transaction, and metric_points is unique on (job, seq), so a replay
skips what is there. These run the real path — an events.jsonl read by `EventTail`, `Ingestor` writing
to SQLite and PostgreSQL (COPY in binary for a large batch, INSERT … ON CONFLICT for a small one) — and
crash it on purpose: between the points' write and the offset's commit, midway through the points (on
PostgreSQL, with the COPY open), and after the commit but before the ingester learns of it. After each,
a new ingester re-reads the file from offset 0, as a restarted worker does, and every point is there once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlmodel import Session

from core.db import get_engine
from core.migrate import upgrade
from core.tables import Job, JobStatus

LARGE = 1_500  # past COPY_THRESHOLD: PostgreSQL COPYs the batch
SMALL = 40  # under it: INSERT … ON CONFLICT DO NOTHING on both databases


class Crash(Exception):
    """The worker dying at the injected point."""


def _job(url: str) -> int:
    upgrade(url)
    with Session(get_engine(url)) as s:
        job = Job(name="t", spec={}, status=JobStatus.running, attempt=1)
        s.add(job)
        s.commit()
        assert job.id is not None
        return job.id


def _write_events(path: Path, first_seq: int, n: int) -> None:
    """`n` metric events from `first_seq` on, appended to events.jsonl, a progress event among them."""
    with path.open("a") as fh:
        for seq in range(first_seq, first_seq + n):
            if seq % 500 == 499:
                ev: dict[str, Any] = {"seq": seq, "time": 1.0, "type": "progress", "step": seq // 2}
            else:
                ev = {"seq": seq, "time": 1.0, "type": "metric", "step": seq // 2, "name": "ab"[seq % 2], "value": seq}
            fh.write(json.dumps(ev) + "\n")


def _metric_seqs(first_seq: int, n: int) -> set[int]:
    return {seq for seq in range(first_seq, first_seq + n) if seq % 500 != 499}


def _stored(url: str, job_id: int) -> tuple[int, set[int]]:
    """(rows, distinct seqs) of the job's points."""
    with get_engine(url).connect() as conn:
        seqs = conn.execute(text("SELECT seq FROM metric_points WHERE job_id = :j"), {"j": job_id}).scalars().all()
    return len(seqs), set(seqs)


def _ingested_seq(url: str, job_id: int) -> int:
    with Session(get_engine(url)) as s:
        job = s.get(Job, job_id)
        assert job is not None
        return job.ingested_seq


def _run_worker(url: str, job_id: int, events: Path) -> int:
    """A worker (re)started: a new tail from offset 0 and a new ingester, until the file is read. Points written."""
    from worker.ingest import Ingestor
    from worker.ingest_events import EventTail

    tail, ingestor, new = EventTail(events), Ingestor(get_engine(url), job_id), 0
    while batch := tail.read():
        new += ingestor.ingest(batch)
    return new


def _assert_each_once(url: str, job_id: int, expected: set[int]) -> None:
    rows, seqs = _stored(url, job_id)
    assert seqs == expected
    assert rows == len(expected)  # no seq twice


@pytest.mark.parametrize("n", [LARGE, SMALL])
def test_a_replay_from_offset_zero_writes_nothing_twice(database_url, tmp_path, n):
    job_id = _job(database_url)
    events = tmp_path / "events.jsonl"
    _write_events(events, 0, n)
    assert _run_worker(database_url, job_id, events) == len(_metric_seqs(0, n))
    assert _run_worker(database_url, job_id, events) == 0  # restarted: the offset skips it all
    _write_events(events, n, n)  # the ranks carried on
    assert _run_worker(database_url, job_id, events) == len(_metric_seqs(n, n))
    _assert_each_once(database_url, job_id, _metric_seqs(0, 2 * n))
    assert _ingested_seq(database_url, job_id) == 2 * n - 1


@pytest.mark.parametrize("n", [LARGE, SMALL])
def test_a_crash_between_the_points_and_the_offset_commit_loses_and_doubles_nothing(
    database_url, tmp_path, monkeypatch, n
):
    from core import jobs
    from worker import ingest

    job_id = _job(database_url)
    events = tmp_path / "events.jsonl"
    _write_events(events, 0, n)
    _run_worker(database_url, job_id, events)  # a first batch, committed
    _write_events(events, n, n)
    record_ingested = jobs.record_ingested

    def offset_then_crash(*args: Any, **kwargs: Any) -> None:
        record_ingested(*args, **kwargs)  # the offset written (points too), not committed
        raise Crash

    monkeypatch.setattr(ingest.jobs, "record_ingested", offset_then_crash)
    with pytest.raises(Crash):
        _run_worker(database_url, job_id, events)
    # The second batch's points went with the offset: neither is there.
    _assert_each_once(database_url, job_id, _metric_seqs(0, n))
    assert _ingested_seq(database_url, job_id) == n - 1

    monkeypatch.undo()
    assert _run_worker(database_url, job_id, events) == len(_metric_seqs(n, n))
    _assert_each_once(database_url, job_id, _metric_seqs(0, 2 * n))
    assert _ingested_seq(database_url, job_id) == 2 * n - 1


def test_a_crash_inside_the_bulk_write_leaves_no_part_of_the_batch(database_url, tmp_path, monkeypatch):
    from worker import ingest, ingest_copy

    job_id = _job(database_url)
    events = tmp_path / "events.jsonl"
    _write_events(events, 0, LARGE)
    if database_url.startswith("postgresql"):  # the COPY is open while the events are read: die midway
        send = ingest_copy.PointStream.send

        def send_then_crash(self: Any) -> None:
            send(self)
            if self.sent > LARGE // 2:
                raise Crash

        monkeypatch.setattr(ingest_copy.PointStream, "send", send_then_crash)
    else:
        insert = ingest.Ingestor._insert_points

        def half_then_crash(self: Any, conn: Any, points: list) -> None:
            insert(self, conn, points[: len(points) // 2])
            raise Crash

        monkeypatch.setattr(ingest.Ingestor, "_insert_points", half_then_crash)
    with pytest.raises(Crash):
        _run_worker(database_url, job_id, events)
    assert _stored(database_url, job_id) == (0, set())
    assert _ingested_seq(database_url, job_id) == -1

    monkeypatch.undo()
    _run_worker(database_url, job_id, events)
    _assert_each_once(database_url, job_id, _metric_seqs(0, LARGE))


def test_a_crash_after_the_commit_replays_into_nothing_new(database_url, tmp_path, monkeypatch):
    """The batch committed, then the worker died before it noted so: the restart finds the offset moved."""
    from worker import ingest

    job_id = _job(database_url)
    events = tmp_path / "events.jsonl"
    _write_events(events, 0, LARGE)

    def crash(*_args: Any) -> None:
        raise Crash

    monkeypatch.setattr(ingest.Ingestor, "_kept", crash)
    with pytest.raises(Crash):
        _run_worker(database_url, job_id, events)
    monkeypatch.undo()
    _assert_each_once(database_url, job_id, _metric_seqs(0, LARGE))
    assert _run_worker(database_url, job_id, events) == 0
    _assert_each_once(database_url, job_id, _metric_seqs(0, LARGE))


def test_an_ill_typed_time_is_stored_as_zero_and_the_ingest_goes_on(database_url, tmp_path):
    """A line's `time` is not checked by the file's writer (a user's rank 0 may write anything): a value that is
    not a number must not raise in the handler (the batch, and supervision with it, would fail on every tick)."""
    job_id = _job(database_url)
    events = tmp_path / "events.jsonl"
    lines = [
        {"seq": 0, "time": "soon", "type": "metric", "step": 1, "name": "a", "value": 1.0},
        {"seq": 1, "time": [1], "type": "metric", "step": 2, "name": "a", "value": 2.0},
        {"seq": 2, "time": 7, "type": "metric", "step": 3, "name": "a", "value": 3.0},
    ]
    events.write_text("".join(json.dumps(ev) + "\n" for ev in lines))
    assert _run_worker(database_url, job_id, events) == 3
    with get_engine(database_url).connect() as conn:
        times = conn.execute(text("SELECT time FROM metric_points WHERE job_id = :j ORDER BY seq"), {"j": job_id})
        assert times.scalars().all() == [0.0, 0.0, 7.0]
