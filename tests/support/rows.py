"""Rows written straight into a database, as the worker would write them, so tests need no training
run: a job in any state (`insert_job`, or `seed_job` with a plausible history), its timeline, metric
points (a million of them in one SQL statement), checkpoints and rank logs."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlmodel import Session

from core.tables import Checkpoint, Job, JobStatus, JobTransition
from tests.support.jobs import DIGITS_SPEC
from trainer.spec import JobSpec

PATH_TO_TERMINAL = {
    "queued": ["queued"],
    "running": ["queued", "starting", "running"],
    "succeeded": ["queued", "starting", "running", "succeeded"],
    "failed": ["queued", "starting", "running", "failed"],
    "cancelled": ["queued", "starting", "running", "cancelling", "cancelled"],
}


def insert_job(
    db: Session,
    name: str = "job",
    status: JobStatus = JobStatus.queued,
    spec: dict[str, Any] | None = None,
    **fields: Any,
) -> Job:
    """A job row in any status and its one transition, as the worker would find it (spec: DIGITS_SPEC)."""
    job = Job(name=name, spec=spec or {**DIGITS_SPEC, "name": name}, status=status, **fields)
    db.add(job)
    db.flush()
    db.add(JobTransition(job_id=job.id, status=status))
    db.commit()
    db.refresh(job)
    return job


@dataclass(frozen=True)
class JobSeed:
    """What `seed_job` may be told besides the job's name and status."""

    total_steps: int = 1000
    step: int | None = None
    spec: dict[str, Any] | None = None
    error: str | None = None
    failed_rank: int | None = None
    exit_code: int | None = None
    minutes: float = 6.0


def seed_job(db: Session, name: str, status: str = "succeeded", *, runs_dir: Path, **fields: Any) -> Job:
    """A job that got to `status` the way the worker takes one there; `fields`: those of JobSeed."""
    seed = JobSeed(**fields)
    total_steps, spec, error, minutes = seed.total_steps, seed.spec, seed.error, seed.minutes
    spec_model = JobSpec.model_validate({"name": name, "max_steps": total_steps, **(spec or {})})
    now = datetime.now(timezone.utc)
    started = now - timedelta(minutes=minutes)
    done = status in ("succeeded", "failed", "cancelled")
    step = seed.step if seed.step is not None else {"succeeded": total_steps, "queued": 0}.get(status, total_steps // 2)
    job = Job(
        name=name,
        spec=spec_model.model_dump(mode="json"),
        status=JobStatus(status),
        attempt=1,
        created_at=started - timedelta(seconds=3),
        started_at=started if status != "queued" else None,
        finished_at=now if done else None,
        worker_host="gpu-host-1" if status != "queued" else None,
        step=step if status != "queued" else 0,
        total_steps=total_steps,
        epoch=step // 50,
        samples=step * spec_model.global_batch_size,
        samples_per_s=1843.2 if status != "queued" else None,
        eta_s=(total_steps - step) / 5.0 if status == "running" else None,
        latest_loss=0.2 + 2.0 / (1 + step / 100) if status != "queued" else None,
        error=error,
        failed_rank=seed.failed_rank,
        exit_code=seed.exit_code,
    )
    db.add(job)
    db.flush()
    job.run_dir = str(runs_dir / str(job.id))
    for i, s in enumerate(PATH_TO_TERMINAL[status]):
        at = job.created_at + timedelta(seconds=i * 2) if i < 3 else now
        detail = {
            "starting": "claimed by gpu-host-1",
            "running": f"torchrun pid 4242, {spec_model.world_size} rank(s)",
            "failed": error,
            "cancelling": "cancel requested",
        }.get(s)
        db.add(
            JobTransition(job_id=job.id, status=JobStatus(s), at=at, attempt=1 if s != "queued" else 0, detail=detail)
        )
    db.commit()
    db.refresh(job)
    return job


@dataclass(frozen=True)
class Series:
    """The shape of `bulk_points`'s series: a point every `every` steps, seq from `first_seq`, values of `kind`."""

    every: int = 1
    first_seq: int = 0
    kind: str = "loss"


def bulk_points(db: Session, job_id: int, name: str, n: int, **shape: Any) -> None:
    """n points of one series in one INSERT … SELECT (SQLite: a recursive CTE; PostgreSQL: generate_series);
    `shape`: the fields of Series."""
    series = Series(**shape)
    every, first_seq = series.every, series.first_seq
    value = {
        # A decaying loss with a deterministic wiggle; only + - * / and % so plain SQLite can compute it.
        "loss": "0.15 + 2.2 / (1 + i * :every / 3000.0) + ((i * 7919) % 1000) / 8000.0",
        "accuracy": "0.98 - 0.85 / (1 + i * :every / 500.0)",
        "lr": "0.05 * (1 - (i * :every * 1.0) / (:n * :every + 1))",
    }[series.kind]
    if db.get_bind().dialect.name == "postgresql":
        sql = f"""INSERT INTO metric_points (job_id, seq, step, name, value, time)
                  SELECT :job, :seq0 + i, (i + 1) * :every, :name, {value}, 0 FROM generate_series(0, :n - 1) AS i"""
    else:
        sql = f"""WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i < :n - 1)
                  INSERT INTO metric_points (job_id, seq, step, name, value, time)
                  SELECT :job, :seq0 + i, (i + 1) * :every, :name, {value}, 0 FROM s"""
    db.execute(text(sql), {"job": job_id, "seq0": first_seq, "every": every, "name": name, "n": n})
    db.commit()


def seed_curves(db: Session, job: Job, steps: int) -> None:
    """train/loss every step, val/loss and val/accuracy every 50, lr every 10."""
    bulk_points(db, job.id, "train/loss", steps, first_seq=0)
    bulk_points(db, job.id, "val/loss", steps // 50, every=50, first_seq=10_000_000, kind="loss")
    bulk_points(db, job.id, "val/accuracy", steps // 50, every=50, first_seq=20_000_000, kind="accuracy")
    bulk_points(db, job.id, "lr", steps // 10, every=10, first_seq=30_000_000, kind="lr")


def seed_checkpoint(db: Session, job: Job, step: int, payload: bytes = b"") -> Checkpoint:
    payload = payload or f"checkpoint of {job.name} at step {step}\n".encode() * 512
    run = Path(job.run_dir)
    path = Path("checkpoints") / f"step_{step:08d}.pt"
    (run / path).parent.mkdir(parents=True, exist_ok=True)
    (run / path).write_bytes(payload)
    row = Checkpoint(
        job_id=job.id,
        step=step,
        epoch=step // 50,
        path=str(path),
        bytes=len(payload),
        sha256=hashlib.sha256(payload).hexdigest(),
    )
    db.add(row)
    db.commit()
    db.refresh(row)
    return row


def seed_logs(job: Job, ranks: int = 2) -> None:
    for rank in range(ranks):
        d = Path(job.run_dir) / "logs" / "attempt_1" / "run_0" / "attempt_0" / str(rank)
        d.mkdir(parents=True, exist_ok=True)
        lines = [
            f"[rank {rank}] step {s:5d}  loss {0.2 + 2 / (1 + s / 100):.4f}  lr {0.05 * math.cos(s / 2000):.5f}"
            for s in range(0, 1000, 10)
        ]
        (d / "stderr.log").write_text("\n".join(lines) + "\n")
        (d / "stdout.log").write_text(f"rank {rank} ready\n")
