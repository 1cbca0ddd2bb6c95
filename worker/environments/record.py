"""The job's environment row (core/tables.py `JobEnvironment`): its lock, how its preparation went.

The lock is written once per job (`save_lock` keeps the first one): every node, restart and later attempt
reads it back. A new job takes the lock of another job with the same requirements on the same Python and
torch resolved within RANKZERO_ENVIRONMENT_REUSE_S (or, whatever its age, of the job whose checkpoint it
resumes, or of its sweep's first trial: `sweep_source`), so the same set is not resolved again and starts
from the cache.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from sqlalchemy import update
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from core.job_state import LIVE
from core.tables import Job, JobEnvironment, SweepTrial


def now() -> datetime:
    return datetime.now(timezone.utc)


def get(engine: Engine, job_id: int) -> JobEnvironment | None:
    with Session(engine) as s:
        return s.get(JobEnvironment, job_id)


def begin(engine: Engine, job_id: int, input_hash: str) -> JobEnvironment:
    """The job's row, made at its first preparation; a row for other requirements (never: the spec is
    immutable) would be reset."""
    with Session(engine) as s:
        row = s.get(JobEnvironment, job_id)
        if row is None or row.input_hash != input_hash:
            row = row or JobEnvironment(job_id=job_id, input_hash=input_hash)
            row.input_hash, row.lock, row.key, row.packages = input_hash, None, None, None
        row.state = "resolving" if row.lock is None else "building"
        row.error, row.updated_at = None, now()
        s.add(row)
        s.commit()
        s.refresh(row)
        return row


def reusable_lock(
    engine: Engine, input_hash: str, python: str, torch: str, within_s: float, from_job: int | None
) -> str | None:
    """A lock another job resolved for the same requirements, Python and torch: the resumed job's whatever its
    age, else the newest resolved within `within_s`."""
    with Session(engine) as s:
        base = select(JobEnvironment).where(
            col(JobEnvironment.input_hash) == input_hash,
            col(JobEnvironment.python) == python,
            col(JobEnvironment.torch) == torch,
            col(JobEnvironment.lock).is_not(None),
        )
        if from_job is not None:
            row = s.exec(base.where(col(JobEnvironment.job_id) == from_job)).first()
            if row is not None:
                return row.lock
        if within_s <= 0:
            return None
        since = now() - timedelta(seconds=within_s)
        query = base.where(col(JobEnvironment.resolved_at) >= since).order_by(col(JobEnvironment.resolved_at).desc())
        row = s.exec(query).first()
        return row.lock if row is not None else None


def sweep_source(engine: Engine, job_id: int) -> int | None:
    """The job of the first trial of this job's sweep that has a lock (None: not a trial, or none has one):
    a sweep's trials compare hyperparameters, never package versions, however long the sweep runs."""
    with Session(engine) as s:
        sweep = s.exec(select(SweepTrial.sweep_id).where(col(SweepTrial.job_id) == job_id)).first()
        if sweep is None:
            return None
        query = (
            select(SweepTrial.job_id)
            .join(JobEnvironment, col(JobEnvironment.job_id) == col(SweepTrial.job_id))
            .where(col(SweepTrial.sweep_id) == sweep, col(SweepTrial.job_id) != job_id,
                   col(JobEnvironment.lock).is_not(None))
            .order_by(col(SweepTrial.number))
        )  # fmt: skip
        return s.exec(query).first()


def save_lock(  # noqa: PLR0913 (the lock and what it was resolved against)
    engine: Engine, job_id: int, lock: str, packages: list[dict[str, str]], own_torch: bool, python: str, torch: str
) -> str:
    """Record the job's lock unless it has one already; the lock the job keeps."""
    with engine.begin() as conn:
        conn.execute(
            update(JobEnvironment)
            .where(col(JobEnvironment.job_id) == job_id, col(JobEnvironment.lock).is_(None))
            .values(lock=lock, packages=packages, own_torch=own_torch, python=python, torch=torch,
                    resolved_at=now(), state="building", updated_at=now())
        )  # fmt: skip
    row = get(engine, job_id)
    return row.lock if row is not None and row.lock is not None else lock


def done(  # noqa: PLR0913 (the figures of one preparation)
    engine: Engine,
    job_id: int,
    *,
    key: str | None,
    cached: bool,
    prepare_s: float,
    size_bytes: int | None = None,
    error: str | None = None,
) -> None:
    values: dict[str, object] = {"state": "failed" if error else "ready", "cached": cached, "prepare_s": prepare_s,
                                 "error": error, "updated_at": now()}  # fmt: skip
    if key is not None:
        values["key"] = key
    if size_bytes is not None:
        values["size_bytes"] = size_bytes
    with engine.begin() as conn:
        conn.execute(update(JobEnvironment).where(col(JobEnvironment.job_id) == job_id).values(**values))


def keys_in_use(engine: Engine) -> set[str]:
    """The cache entries of live jobs (never evicted)."""
    with Session(engine) as s:
        query = (
            select(JobEnvironment.key)
            .join(Job, col(Job.id) == col(JobEnvironment.job_id))
            .where(col(Job.status).in_(LIVE), col(JobEnvironment.key).is_not(None))
        )
        return {k for k in s.exec(query).all() if k}
