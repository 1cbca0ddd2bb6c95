"""The Celery configuration the scheduler (producer) and the workers share, and `send_node`.

Nothing is sent at submit: the scheduler (worker/scheduler.py) reads queued rows and sends each placed
node its message (a job id, node rank and placement id, never the job); the database row is the truth
and the broker only the transport. Configured for tasks that run for days (see docs/service.md, "How
Celery is configured"):

* acks_late + reject_on_worker_lost: the message is acknowledged only when the supervising task
  returns, so a worker that dies before claiming the job gives the message back.
* prefetch multiplier 1: a worker reserves one message per free slot; a long job never hides
  queued messages from idle workers.
* Redis visibility_timeout: an unacked message is redelivered after this long even while its job
  is still running. The task's atomic claim (queued → starting) makes such a copy a no-op.
* no time limits, no result backend (results live in the jobs table), JSON only.
"""

from __future__ import annotations

import logging
import threading

from celery import Celery

from core.settings import Settings

log = logging.getLogger("rankzero.queue")
_lock = threading.Lock()
_producers: dict[str, Celery] = {}

TASK_RUN_NODE = "rankzero.run_node"  # one node of a placed job, on its host's own queue


def make_celery(settings: Settings) -> Celery:
    url = settings.resolved_broker_url
    app = Celery("rankzero", broker=url, include=["worker.tasks", "worker.lifecycle"])
    transport_options: dict[str, object] = {}
    if url.startswith(("redis://", "rediss://", "sentinel://")):
        transport_options["visibility_timeout"] = settings.visibility_timeout_s
        from core import kombu_compat

        kombu_compat.install()  # survive a Redis outage with a job running (see the module)
    elif url.startswith("sqla+sqlite"):
        # kombu's SQLAlchemy transport passes its options to create_engine; the API (producer) and
        # the worker share one SQLite file, so wait for its lock rather than fail.
        transport_options["connect_args"] = {"timeout": 30}
        # It polls its table for new messages, once a second by default: that second would be added
        # to every job's start. Poll every embedded_poll_s while busy, less when idle, and wake on a
        # write to the broker's file (a submit): see core/kombu_compat.py.
        from core import kombu_compat

        kombu_compat.poll_adaptively(settings.embedded_poll_s)
        kombu_compat.tolerate_queue_create_race()  # two processes creating one queue row (see the module)
    app.conf.update(
        task_default_queue=settings.queue,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_track_started=False,
        task_ignore_result=True,
        result_backend=None,
        task_serializer="json",
        accept_content=["json"],
        task_time_limit=None,
        task_soft_time_limit=None,
        broker_transport_options=transport_options,
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,  # ride out a broker outage instead of exiting
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
        worker_cancel_long_running_tasks_on_connection_loss=False,
        enable_utc=True,
    )
    app.conf.rankzero_settings = settings
    return app


def _producer(settings: Settings) -> Celery:
    key = f"{settings.resolved_broker_url} {settings.queue}"
    with _lock:
        if key not in _producers:
            _producers[key] = make_celery(settings)
        return _producers[key]


def send_node(job_id: int, node_rank: int, placement_id: str, host_queue: str, settings: Settings) -> None:
    """Tell one host to run node `node_rank` of job `job_id` as placed (`placement_id` fences stale copies)."""
    app = _producer(settings)
    app.send_task(
        TASK_RUN_NODE,
        args=[int(job_id), int(node_rank), placement_id],
        queue=host_queue,
        retry=True,
        retry_policy={"max_retries": 2, "interval_start": 0.2, "interval_step": 0.5, "interval_max": 1},
    )
