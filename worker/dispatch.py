"""What the API calls after inserting a queued Job: send its id (never the job itself) to the broker."""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timezone

from celery import Celery
from sqlalchemy import update

from api.db import get_engine
from api.settings import Settings
from api.tables import Job, JobStatus
from worker.celery_app import TASK_RUN_JOB, make_celery

log = logging.getLogger("rankzero.worker")
# The heartbeat of a queued job whose message could not be sent (broker down): long stale, so the
# recovery sweep (worker/recover.py) dispatches it again once the broker is back.
UNDISPATCHED = datetime(2000, 1, 1, tzinfo=timezone.utc)
_lock = threading.Lock()
_producers: dict[str, Celery] = {}


def _producer(settings: Settings) -> Celery:
    key = f"{settings.resolved_broker_url} {settings.queue}"
    with _lock:
        if key not in _producers:
            _producers[key] = make_celery(settings)
        return _producers[key]


def enqueue(job_id: int, settings: Settings) -> None:
    """Ask some worker to run job `job_id`. Safe to call twice: the worker claims the row atomically."""
    app = _producer(settings)
    app.send_task(
        TASK_RUN_JOB,
        args=[int(job_id)],
        queue=app.conf.task_default_queue,
        retry=True,
        retry_policy={"max_retries": 5, "interval_start": 0.2, "interval_step": 0.5, "interval_max": 3},
    )


def mark_undispatched(job_id: int, settings: Settings) -> None:
    """Note on the row that job `job_id` (still queued) has no message: the recovery sweep resends it."""
    with get_engine(settings.resolved_database_url).begin() as conn:
        conn.execute(update(Job).where(Job.id == job_id, Job.status == JobStatus.queued).values(heartbeat_at=UNDISPATCHED))  # type: ignore[arg-type]


def enqueue_or_defer(job_id: int, settings: Settings) -> bool:
    """`enqueue`, or when the broker is unreachable leave the job for the recovery sweep to resend. True: sent."""
    try:
        enqueue(job_id, settings)
        return True
    except Exception as exc:  # noqa: BLE001 - any broker failure: the database row stays the truth
        log.warning("job %s: broker unreachable (%s); the recovery sweep will dispatch it", job_id, exc)
        mark_undispatched(job_id, settings)
        return False
