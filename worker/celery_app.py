"""The worker's Celery app: `celery -A worker.celery_app worker` (or `rankzero worker`).

Its configuration is shared with the API's producer and lives in `core/queue.py`.
"""

from __future__ import annotations

from kombu.entity import Queue

from core.hosts import host_queue
from core.queue import make_celery
from core.settings import get_settings

__all__ = ["app"]

_settings = get_settings()
app = make_celery(_settings)
# A worker takes its host's own queue, where the scheduler sends the nodes it placed here
# (worker/scheduler.py), and its pool's queue (the default queue: nothing is sent there any more).
app.conf.task_queues = (
    Queue(_settings.queue),
    Queue(host_queue(_settings.queue, _settings.resolved_host_name)),
)
