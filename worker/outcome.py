"""Writing a decided outcome (worker/decide.py) to the job row: the one place an attempt's end is written.

Every write goes through core/jobs.py, fenced by the attempt (a replaced supervisor writes nothing);
the writer wakes the scheduler once after its commit (a requeued job or a freed place).
"""

from __future__ import annotations

import dataclasses

from sqlalchemy.engine import Engine

from core import jobs
from core.bundles import excluded
from core.settings import Settings, get_settings
from core.tables import Job, JobStatus
from worker.decide import Counting, Fail, Finish, Nothing, Outcome, Requeue
from worker.user_paths import for_job, scrub

S = JobStatus


def apply(engine: Engine, job_id: int, attempt: int, outcome: Outcome) -> str:
    """Write `outcome` for attempt `attempt` of job `job_id`; return the task's one-line account."""
    return f"job {job_id}: {_write(engine, job_id, attempt, user_facing(outcome, job_id, engine))}"


def user_facing(outcome: Outcome, job_id: int, engine: Engine | None = None) -> Outcome:
    """The outcome with no worker path in what the user reads (worker/user_paths.py), and a failure that
    could not open a file the upload left out says so first (issue 27: core/bundles/excluded.py `headline`)."""
    try:
        settings = get_settings()
        names = for_job(settings, job_id)
    except Exception:  # never lose an outcome over its wording
        return outcome
    if isinstance(outcome, Fail):
        error, detail = scrub(outcome.error, names) or "", scrub(outcome.detail, names) or ""
        said = _left_out_headline(engine, settings, job_id, error)
        if said is not None:
            error, detail = f"{said}\n{error}", f"{said}; {detail}"[:500]
        return dataclasses.replace(outcome, error=error, detail=detail)
    if isinstance(outcome, Requeue):
        otherwise = user_facing(outcome.otherwise, job_id) if outcome.otherwise is not None else None
        return dataclasses.replace(outcome, detail=scrub(outcome.detail, names) or "", otherwise=otherwise)  # type: ignore[arg-type]
    return outcome


def _left_out_headline(engine: Engine | None, settings: Settings, job_id: int, error: str) -> str | None:
    """'data/train.bin was left out of the upload by .gitignore line 3 `*.bin` …' when the failure names a missing
    file that the job's bundle records as left out (its unpacked copy on this host); else None."""
    if engine is None or "No such file" not in error and "not found" not in error.lower():
        return None
    try:
        job = jobs.get_job(engine, job_id)
        code = job.spec.get("code") if job is not None and isinstance(job.spec, dict) else None
        if not isinstance(code, str):
            return None
        # The record lives beside the bundle in the store (a worker without the shared store has none here).
        return excluded.headline(error, excluded.read_record(settings, code))
    except Exception:  # a headline is a courtesy: the failure is written without it
        return None


def _write(engine: Engine, job_id: int, attempt: int, outcome: Outcome) -> str:
    if isinstance(outcome, Nothing):
        return outcome.account
    if isinstance(outcome, Finish):
        extra = {"eta_s": 0.0} if outcome.status is S.succeeded else {}
        won = jobs.finish(
            engine, job_id, outcome.status, detail=outcome.detail, attempt=attempt, exit_code=outcome.exit_code, **extra
        )
        return outcome.account if won or not outcome.account_if_lost else outcome.account_if_lost
    if isinstance(outcome, Fail):
        jobs.finish(
            engine,
            job_id,
            S.failed,
            detail=outcome.detail,
            attempt=attempt,
            error=outcome.error,
            failed_rank=outcome.failed_rank,
            exit_code=outcome.exit_code,
        )
        return outcome.account
    return _requeue(engine, job_id, attempt, outcome)


def _requeue(engine: Engine, job_id: int, attempt: int, outcome: Requeue) -> str:
    spent: dict[str, object] = {}
    if outcome.counting is Counting.restart:
        spent = {"restarts_used": Job.restarts_used + 1, "failed_rank": outcome.failed_rank}
    elif outcome.counting is Counting.host_loss:
        spent = {"host_losses": Job.host_losses + 1}
    won = jobs.requeue(engine, job_id, detail=outcome.detail, attempt=attempt, exit_code=outcome.exit_code, **spent)
    if not won and outcome.otherwise is not None:
        return _write(engine, job_id, attempt, outcome.otherwise)
    return outcome.account
