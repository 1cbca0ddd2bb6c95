"""What the API calls after inserting a queued Job: send its id (never the job itself) to the broker."""

from __future__ import annotations

import threading

from celery import Celery

from api.settings import Settings
from worker import config
from worker.celery_app import TASK_RUN_JOB, make_celery

_lock = threading.Lock()
_producers: dict[str, Celery] = {}


def _producer(settings: Settings) -> Celery:
    key = f"{settings.resolved_broker_url} {config.queue_name()}"
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
