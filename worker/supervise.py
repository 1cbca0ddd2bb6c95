"""Running one node of a placed job: the body of the Celery task `run_node`.

A message for a placement the row no longer holds is a no-op; node 0 claims the job and supervises
it (worker/node_zero.py: launch, watch, outcome); every other node follows it (worker/follower.py).
"""

from __future__ import annotations

from sqlalchemy.engine import Engine

from core import code_policy, jobs, pools
from core.db import get_engine
from core.placement_record import BadPlacement, read_placement
from core.settings import Settings
from core.tables import Job, JobStatus
from trainer.spec import JobSpec
from worker import follower, node_zero

S = JobStatus


def run_node(job_id: int, node_rank: int, placement_id: str, settings: Settings) -> str:
    """Run node `node_rank` of job `job_id` as the scheduler placed it; return a one-line account."""
    engine = get_engine(settings.resolved_database_url)
    job = jobs.get_job(engine, job_id)
    if job is None:
        return f"job {job_id}: no such job"
    if not pools.host_may_run(settings.queue, job.queue):  # a stray message: never run another pool's job
        return f"job {job_id}: of pool {job.queue!r}, and this host serves pool {settings.queue!r}; nothing to do"
    try:
        placed = read_placement(job) if job.placement_id == placement_id else None
    except BadPlacement as exc:
        return f"job {job_id}: {exc}; nothing to do"
    if placed is None:
        return f"job {job_id}: placement {placement_id[:8]} is no longer the job's; nothing to do"
    if node_rank > 0:
        return follower.run_follower(engine, settings, job_id, node_rank, placement_id)
    if job.status != S.queued:
        return f"job {job_id}: {job.status.value}, nothing to do (a repeated delivery)"
    spec = _runnable_spec(engine, job, settings)
    if isinstance(spec, str):
        return spec
    return node_zero.claim_and_run(engine, settings, job, spec, placed, placement_id)


def _runnable_spec(engine: Engine, job: Job, settings: Settings) -> JobSpec | str:
    """The job's spec, or (having failed the job) a one-line account of why this worker will not run it."""
    job_id = job.id
    assert job_id is not None  # a row read from the database
    try:
        spec = JobSpec.model_validate(job.spec)
    except ValueError as exc:  # stored by an older version, say: fail it rather than leave it queued
        jobs.refuse(engine, job_id, f"the stored spec is no longer valid: {exc}; resubmit it")
        return f"job {job_id}: invalid spec"
    refusal = code_policy.user_code_refusal(spec, settings)  # the allow-list may have changed since submit
    if refusal is not None:
        jobs.refuse(engine, job_id, f"refused by this worker: {refusal[1]}")
        return f"job {job_id}: refused, user code not allowed"
    return spec
