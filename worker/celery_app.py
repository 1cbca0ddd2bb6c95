"""The Celery app: `celery -A worker.celery_app worker` (or `rankzero worker`).

Configured for tasks that run for days, where the database row — not the broker message — is the
truth about a job (see docs/service.md, "How Celery is configured"):

* acks_late + reject_on_worker_lost: the message is acknowledged only when the supervising task
  returns, so a worker that dies before claiming the job gives the message back.
* prefetch multiplier 1: a worker reserves one message per free slot; a long job never hides
  queued messages from idle workers.
* Redis visibility_timeout: an unacked message is redelivered after this long even while its job
  is still running. The task's atomic claim (queued → starting) makes such a copy a no-op.
* no time limits, no result backend (results live in the jobs table), JSON only.
"""

from __future__ import annotations

from celery import Celery

from api.settings import Settings, get_settings

TASK_RUN_JOB = "rankzero.run_job"


def make_celery(settings: Settings) -> Celery:
    url = settings.resolved_broker_url
    app = Celery("rankzero", broker=url, include=["worker.tasks", "worker.lifecycle"])
    transport_options: dict[str, object] = {}
    if url.startswith(("redis://", "rediss://", "sentinel://")):
        transport_options["visibility_timeout"] = settings.visibility_timeout_s
        from worker import kombu_compat

        kombu_compat.install()  # survive a Redis outage with a job running (see the module)
    elif url.startswith("sqla+sqlite"):
        # kombu's SQLAlchemy transport passes its options to create_engine; the API (producer) and
        # the worker share one SQLite file, so wait for its lock rather than fail.
        transport_options["connect_args"] = {"timeout": 30}
        # It polls its table for new messages, once a second by default: that second would be added
        # to every job's start. Its options all go to create_engine, so set the class attribute.
        from kombu.transport.sqlalchemy import Transport

        Transport.polling_interval = settings.embedded_poll_s
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


app = make_celery(get_settings())
