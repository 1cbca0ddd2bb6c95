"""The worker's Celery app: `celery -A worker.celery_app worker` (or `rankzero worker`).

Its configuration is shared with the API's producer and lives in `core/queue.py`.
"""

from __future__ import annotations

from core.queue import TASK_RUN_JOB, make_celery
from core.settings import get_settings

__all__ = ["TASK_RUN_JOB", "app"]

app = make_celery(get_settings())
