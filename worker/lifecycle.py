"""Worker start and stop hooks (Celery signals, main process): migrate, announce GPUs, recover
jobs of dead workers, and on shutdown tell the supervisors to hand their jobs back."""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery.signals import worker_ready, worker_shutting_down

from core import capacity
from core.settings import Settings
from worker import drain, recover

log = logging.getLogger("rankzero.worker")
_stop = threading.Event()


def _settings(sender: Any) -> Settings:
    app = getattr(sender, "app", None)
    return app.conf.rankzero_settings


def prepare(settings: Settings) -> None:
    """Everything a worker needs before it takes a job (also called by `rankzero worker`)."""
    from core.migrate import upgrade

    upgrade(settings.resolved_database_url)
    settings.resolved_runs_dir.mkdir(parents=True, exist_ok=True)
    capacity.register_host(settings)
    drain.clear_drain(settings)


@worker_ready.connect
def _on_ready(sender: Any = None, **_: Any) -> None:
    settings = _settings(sender)
    prepare(settings)
    recover.start_recovery_thread(settings, _stop)


@worker_shutting_down.connect
def _on_shutdown(sender: Any = None, **_: Any) -> None:
    from worker.celery_app import app

    _stop.set()
    drain.request_drain(app.conf.rankzero_settings)
    log.warning("worker shutting down: running jobs checkpoint and go back to the queue")
