"""The bulk insert path of metric points (worker/ingest.py) on SQLite and PostgreSQL.

PostgreSQL COPYs a batch straight into metric_points and checks the job's foreign key once per batch
(where the role may): these prove that no point is lost or stored twice on any path — a racing or
stale ingester, a seq repeated inside a batch — and that the foreign key still refuses points of a
job that does not exist, and that the shortcut steps aside when metric_points has a trigger of its own.
"""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlmodel import Session

from core.db import get_engine
from core.migrate import upgrade
from core.tables import Job, JobStatus

N = 3_000  # above COPY_THRESHOLD: PostgreSQL takes the COPY path


def _job(url: str) -> int:
    upgrade(url)
    with Session(get_engine(url)) as s:
        job = Job(name="t", spec={}, status=JobStatus.running, attempt=1)
        s.add(job)
        s.commit()
        assert job.id is not None
        return job.id


def _metrics(n: int, first_seq: int = 0) -> list[dict]:
    return [
        {"seq": s, "time": 1.0, "type": "metric", "step": s // 2, "name": ("a", "b")[s % 2], "value": s}
        for s in range(first_seq, first_seq + n)
    ]


def _stored(url: str, job_id: int) -> tuple[int, int]:
    with get_engine(url).connect() as conn:
        total, seqs = conn.execute(
            text("SELECT count(*), count(DISTINCT seq) FROM metric_points WHERE job_id = :j"), {"j": job_id}
        ).one()
    return total, seqs


def _stale(url: str, job_id: int):
    """An ingester that believes nothing of the job was ingested (it lost its place, or races another)."""
    from worker.ingest import Ingestor

    ingestor = Ingestor(get_engine(url), job_id)
    ingestor.ingested_seq, ingestor.max_step = -1, {}
    return ingestor


def test_points_exactly_once_whoever_ingests(database_url):
    from worker.ingest import Ingestor

    job_id = _job(database_url)
    engine = get_engine(database_url)
    events = _metrics(N)
    assert Ingestor(engine, job_id).ingest(events) == N
    assert _stored(database_url, job_id) == (N, N)
    assert Ingestor(engine, job_id).ingest(events) == 0  # a restarted worker re-reading the file
    # A stale ingester re-sends every seq: the (job, seq) key alone keeps them out (on PostgreSQL
    # the COPY is refused and the batch goes the ON CONFLICT way), and the batch still counts.
    stale = _stale(database_url, job_id)
    stale.ingest(events + _metrics(10, first_seq=N))
    assert _stored(database_url, job_id) == (N + 10, N + 10)
    with Session(engine) as s:
        assert s.get(Job, job_id).ingested_seq == N + 9


def test_a_seq_repeated_inside_one_batch_is_stored_once(database_url):
    from worker.ingest import Ingestor

    job_id = _job(database_url)
    events = _metrics(N)
    twice = {**events[-1], "step": events[-1]["step"] + 1}  # same seq, a step past the rest: not a replay
    Ingestor(get_engine(database_url), job_id).ingest([*events, twice])
    assert _stored(database_url, job_id) == (N, N)


@pytest.mark.postgres
def test_postgres_foreign_key_still_refuses_a_missing_job(pg_url):
    from psycopg.errors import ForeignKeyViolation

    from worker.ingest import Ingestor

    job_id = _job(pg_url)
    ingestor = Ingestor(get_engine(pg_url), job_id)
    with get_engine(pg_url).begin() as conn:
        conn.execute(text("DELETE FROM jobs WHERE id = :j"), {"j": job_id})
    with pytest.raises(ForeignKeyViolation):
        ingestor.ingest(_metrics(N))
    assert _stored(pg_url, job_id) == (0, 0)


@pytest.mark.postgres
def test_postgres_fk_once_only_where_the_fk_is_the_only_trigger(pg_url):
    from worker import ingest, ingest_copy

    job_id = _job(pg_url)
    engine = get_engine(pg_url)
    with engine.connect() as conn:
        cur = conn.connection.dbapi_connection.cursor()
        assert ingest_copy._fk_once_allowed(cur, str(engine.url))  # the test server's role is a superuser
    # A trigger of metric_points' own would be switched off too: then every row keeps its FK check.
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE seen (job_id int, seq bigint)"))
        conn.execute(
            text(
                "CREATE FUNCTION note_point() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN INSERT INTO seen VALUES (NEW.job_id, NEW.seq); RETURN NEW; END $$"
            )
        )
        conn.execute(
            text("CREATE TRIGGER note AFTER INSERT ON metric_points FOR EACH ROW EXECUTE FUNCTION note_point()")
        )
    ingest_copy._fk_once_ok.pop(str(engine.url), None)
    with engine.connect() as conn:
        cur = conn.connection.dbapi_connection.cursor()
        assert not ingest_copy._fk_once_allowed(cur, str(engine.url))
    ingest.Ingestor(engine, job_id).ingest(_metrics(N))
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM seen")).scalar() == N  # the trigger ran for every row
    assert _stored(pg_url, job_id) == (N, N)
