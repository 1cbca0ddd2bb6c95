"""Worker start and stop hooks (Celery signals, main process): migrate, register the host, start the
host heartbeat, the scheduler candidate and the recovery sweep, and on shutdown tell the supervisors
to hand their jobs back."""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery.signals import worker_ready, worker_shutting_down

from core import capacity, hosts
from core.settings import Settings
from worker import drain, host_address, host_watch, notify_sender, recover, sandbox, sandbox_disk, scheduler

log = logging.getLogger("rankzero.worker")
_stop = threading.Event()


def _settings(sender: Any) -> Settings:
    app = getattr(sender, "app", None)
    assert app is not None, "worker_ready comes from a Celery worker, which has its app"
    return app.conf.rankzero_settings


def prepare(settings: Settings) -> None:
    """Everything a worker needs before it takes a job (also called by `rankzero worker`)."""
    from core.migrate import upgrade

    warning = sandbox.check_host(settings.sandbox)  # raises SandboxUnavailable (what to do): no start
    if warning is not None:
        log.warning("%s", warning)
    host_address.check(settings)  # raises HostAddressUnresolvable (what to set): no start
    upgrade(settings.resolved_database_url)
    settings.resolved_runs_dir.mkdir(parents=True, exist_ok=True)
    sandbox_disk.recover(settings.resolved_runs_dir)  # attempts' filesystems a dead worker left mounted (issue 34)
    log.info("%s", sandbox_disk.host_summary(settings.sandbox == "on"))
    hosts.register(settings, capacity.host_gpus(settings))
    drain.clear_drain(settings)


def start_host_heartbeat(settings: Settings, stop: threading.Event) -> threading.Thread:
    """Keep this host's row fresh every heartbeat_s (the scheduler places only on live hosts); on stop,
    mark it draining so nothing new is placed here."""

    def loop() -> None:
        while not stop.wait(settings.heartbeat_s):
            try:
                hosts.beat(settings)
            except Exception:  # the database may be restarting; the next beat tries again
                log.warning("host heartbeat failed", exc_info=True)
        try:
            hosts.beat(settings, draining=True)
        except Exception:
            log.warning("could not mark the host draining", exc_info=True)

    thread = threading.Thread(target=loop, name="rankzero-host-heartbeat", daemon=True)
    thread.start()
    return thread


@worker_ready.connect
def _on_ready(sender: Any = None, **_: Any) -> None:
    settings = _settings(sender)
    prepare(settings)
    start_host_heartbeat(settings, _stop)
    scheduler.start_scheduler_thread(settings, _stop)
    recover.start_recovery_thread(settings, _stop)
    host_watch.start_host_watch(settings, capacity.host_gpus(settings), _stop)  # operator drain, GPU health
    notify_sender.start_sender_thread(settings, _stop)  # webhooks from the notification outbox


@worker_shutting_down.connect
def _on_shutdown(sender: Any = None, **_: Any) -> None:
    from worker.celery_app import app

    _stop.set()
    drain.request_drain(app.conf.rankzero_settings)
    log.warning("worker shutting down: running jobs checkpoint and go back to the queue")
