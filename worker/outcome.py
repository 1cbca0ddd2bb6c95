"""Writing a decided outcome (worker/decide.py) to the job row: the one place an attempt's end is written.

Every write goes through core/jobs.py, fenced by the attempt (a replaced supervisor writes nothing);
the writer wakes the scheduler once after its commit (a requeued job or a freed place).
"""

from __future__ import annotations

from sqlalchemy.engine import Engine

from core import jobs
from core.tables import Job, JobStatus
from worker.decide import Counting, Fail, Finish, Nothing, Outcome, Requeue

S = JobStatus


def apply(engine: Engine, job_id: int, attempt: int, outcome: Outcome) -> str:
    """Write `outcome` for attempt `attempt` of job `job_id`; return the task's one-line account."""
    return f"job {job_id}: {_write(engine, job_id, attempt, outcome)}"


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
