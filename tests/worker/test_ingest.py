"""Ingestion on SQLite and PostgreSQL: idempotent on (job, seq), replayed steps skipped, progress kept."""

from __future__ import annotations

import json

from sqlalchemy import func, select
from sqlmodel import Session

from core.db import get_engine
from core.migrate import upgrade
from core.tables import Checkpoint, Job, JobStatus, MetricPoint


def _job(url: str) -> int:
    upgrade(url)
    with Session(get_engine(url)) as s:
        job = Job(name="t", spec={}, status=JobStatus.running, attempt=1)
        s.add(job)
        s.commit()
        return job.id


def _events(start: int, steps: range) -> list[dict]:
    out, seq = [], start
    for step in steps:
        out.append({"seq": seq, "time": 1.0, "type": "metric", "step": step, "name": "train/loss", "value": 1.0 / step})
        out.append(
            {
                "seq": seq + 1,
                "time": 1.0,
                "type": "progress",
                "step": step,
                "total_steps": 100,
                "epoch": 0,
                "samples": step,
                "samples_per_s": 5.0,
                "eta_s": 1.0,
            }
        )
        seq += 2
    return out


def test_ingest_is_idempotent_and_skips_replays(database_url, tmp_path):
    from worker.ingest import Ingestor

    job_id = _job(database_url)
    engine = get_engine(database_url)
    first = _events(0, range(1, 1001))  # 1000 points: PostgreSQL takes the COPY path
    Ingestor(engine, job_id).ingest(first)
    Ingestor(engine, job_id).ingest(first)  # a restarted worker reading the file again
    fresh = Ingestor(engine, job_id)
    fresh.ingested_seq = -1  # even a worker that lost its place inserts nothing twice
    fresh.ingest(first)
    # A resumed attempt replays steps 901..1000 with new seqs, then carries on to 1100.
    Ingestor(engine, job_id).ingest(_events(5000, range(901, 1101)))
    with Session(engine) as s:
        steps = (
            s.execute(select(MetricPoint.step).where(MetricPoint.job_id == job_id).order_by(MetricPoint.step))
            .scalars()
            .all()
        )
        job = s.get(Job, job_id)
    assert steps == list(range(1, 1101))
    assert job.step == 1100 and job.total_steps == 100 and abs(job.latest_loss - 1 / 1100) < 1e-12


def test_partial_line_waits_and_checkpoints_recorded(database_url, tmp_path):
    from worker.ingest import Ingestor
    from worker.ingest_events import EventTail

    job_id = _job(database_url)
    engine = get_engine(database_url)
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "step_00000005.pt").write_bytes(b"x")
    path = tmp_path / "events.jsonl"
    ck = {
        "seq": 0,
        "time": 1.0,
        "type": "checkpoint",
        "step": 5,
        "epoch": 0,
        "path": "checkpoints/step_00000005.pt",
        "bytes": 1,
        "sha256": "ab",
    }
    line = json.dumps(ck) + "\n"
    path.write_text(line[:10])
    tail = EventTail(path)
    assert tail.read() == []
    with open(path, "a") as fh:
        fh.write(line[10:])
    events = tail.read()
    assert [e["seq"] for e in events] == [0]
    ing = Ingestor(engine, job_id, tmp_path)
    ing.ingest(events)
    ing.ingest(events)
    with Session(engine) as s:
        assert s.execute(select(func.count()).select_from(Checkpoint).where(Checkpoint.job_id == job_id)).scalar() == 1


def test_system_samples_keyed_by_unix_milliseconds_fold_on_every_database(database_url):
    """A system sample's step is its unix time in ms (worker/resources.py `sample_key`): far past int4, so
    the rollups' bucket arithmetic must stay BIGINT (PostgreSQL bound small ints as int4 and overflowed)."""
    from worker.ingest import Ingestor
    from worker.ingest_handlers import TimedMetric
    from worker.resources import sample_key

    job_id = _job(database_url)
    engine = get_engine(database_url)
    now = 1_764_000_000.0
    points = [
        TimedMetric(type="metric", time=now + i, step=sample_key(now + i), name="sys/rss_mb_total", value=100.0 + i)
        for i in range(5)
    ]
    assert Ingestor(engine, job_id).ingest_metrics(points) == 5
    with Session(engine) as s:
        steps = s.execute(select(MetricPoint.step).where(MetricPoint.job_id == job_id)).scalars().all()
    assert sorted(steps) == [sample_key(now + i) for i in range(5)]


def _checkpoint(seq: int, step: int) -> dict:
    return {"seq": seq, "time": 1.0, "type": "checkpoint", "step": step, "epoch": 0,
            "path": f"checkpoints/step_{step:08d}.pt", "bytes": 1, "sha256": "ab"}  # fmt: skip


def test_a_script_that_only_saves_checkpoints_reports_their_step_and_progress_still_wins(database_url):
    """Issue 35: a script job whose checkpoints carry a step read "Steps: not reported"; its newest checkpoint's
    step is its step when nothing else says one, never moving back, and a `progress` event still decides."""
    from worker.ingest import Ingestor

    engine = get_engine(database_url)

    def step_of(job_id: int) -> int:
        with Session(engine) as s:
            job = s.get(Job, job_id)
            assert job is not None
            return job.step

    quiet = _job(database_url)
    ingestor = Ingestor(engine, quiet)
    ingestor.ingest([_checkpoint(0, 40)])
    assert step_of(quiet) == 40
    ingestor.ingest([_checkpoint(1, 80), {"seq": 2, "time": 1.0, "type": "metric", "step": 60, "name": "loss",
                                          "value": 0.5}])  # fmt: skip
    assert step_of(quiet) == 80  # a series behind the checkpoint does not pull it back
    restarted = Ingestor(engine, quiet)  # a restarted worker: its series say 60, the row (a checkpoint's) 80
    restarted.ingest([{"seq": 3, "time": 1.0, "type": "metric", "step": 70, "name": "loss", "value": 0.4}])
    assert step_of(quiet) == 80

    reporting = _job(database_url)
    Ingestor(engine, reporting).ingest([*_events(0, range(1, 4)), _checkpoint(10, 90)])
    assert step_of(reporting) == 3  # its own progress events are the truth
