"""worker/scheduler.py keeps each job's validated spec across passes (issue 29): a pass reads the spec column
only of jobs it has not seen, on a real SQLite database."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import delete, event, insert, update
from sqlalchemy.engine import Engine

from core import migrate
from core.db import get_engine
from core.settings import Settings
from core.tables import Job
from trainer.spec import JobSpec
from worker import scheduler

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


@pytest.fixture
def db(tmp_path: Path) -> tuple[Engine, Settings, list[str]]:
    settings = Settings(data_dir=tmp_path / "data", runs_dir=tmp_path / "runs")  # pyright: ignore[reportCallIssue]
    settings.data_dir.mkdir(parents=True)
    migrate.upgrade(settings.resolved_database_url)
    engine = get_engine(settings.resolved_database_url)
    spec_reads: list[str] = []

    @event.listens_for(engine, "before_cursor_execute")
    def seen(conn, cursor, statement, parameters, context, executemany) -> None:
        if "jobs.spec" in statement:
            spec_reads.append(statement)

    return engine, settings, spec_reads


def add(engine: Engine, job_id: int, spec: dict, created: datetime = T0) -> None:
    with engine.begin() as conn:
        conn.execute(insert(Job).values(id=job_id, name=f"job-{job_id}", spec=spec, status="queued",
                                        priority=0, queue="default", created_at=created))  # fmt: skip


def spec(nproc: int) -> dict:
    return JobSpec.model_validate({"max_steps": 10, "nproc": nproc}).model_dump(mode="json")


def test_a_second_pass_reads_no_spec_and_sees_the_same_jobs(db) -> None:
    engine, settings, spec_reads = db
    add(engine, 1, spec(1))
    add(engine, 2, spec(2))
    first = scheduler._read(engine, settings)
    assert [w.spec.nproc for w in sorted(first.waiting, key=lambda w: w.job_id)] == [1, 2]
    assert len(spec_reads) == 1
    second = scheduler._read(engine, settings)
    assert len(spec_reads) == 1  # nothing new: no spec read
    assert [(w.job_id, w.spec) for w in second.waiting] == [(w.job_id, w.spec) for w in first.waiting]
    add(engine, 3, spec(4))
    third = scheduler._read(engine, settings)
    assert len(spec_reads) == 2 and "IN" in spec_reads[-1].upper()
    assert {w.job_id: w.spec.nproc for w in third.waiting} == {1: 1, 2: 2, 3: 4}


def test_a_row_under_a_known_id_but_created_anew_is_read_again(db) -> None:
    """A database emptied and refilled (ids start again): the id alone must not find the old spec."""
    engine, settings, _ = db
    add(engine, 1, spec(1))
    assert [w.spec.nproc for w in scheduler._read(engine, settings).waiting] == [1]
    with engine.begin() as conn:
        conn.execute(delete(Job).where(Job.id == 1))  # pyright: ignore[reportArgumentType]
    add(engine, 1, spec(8), created=T0 + timedelta(seconds=1))
    assert [w.spec.nproc for w in scheduler._read(engine, settings).waiting] == [8]


def test_a_spec_that_no_longer_validates_is_refused_every_pass_until_it_is(db) -> None:
    engine, settings, spec_reads = db
    add(engine, 1, {**spec(1), "nproc": "many"})
    assert "nproc" in scheduler._read(engine, settings).invalid[1]
    again = scheduler._read(engine, settings)  # known as invalid: not read, still refused
    assert "nproc" in again.invalid[1] and len(spec_reads) == 1 and not again.waiting
    with engine.begin() as conn:  # refused (what schedule_once does): it holds nothing, so it is forgotten
        conn.execute(update(Job).where(Job.id == 1).values(status="failed"))  # pyright: ignore[reportArgumentType]
    assert scheduler._read(engine, settings).invalid == {}
