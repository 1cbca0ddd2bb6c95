"""A worker's watch over its own host, every heartbeat_s: an operator's drain (the host row → the flag
its supervisors read: worker/drain.py) and its GPUs' health (worker/gpu_health.py → the host row, so the
scheduler leaves a failing GPU out)."""

from __future__ import annotations

import logging
import threading

from core import hosts
from core.settings import Settings
from worker import drain
from worker.gpu_health import GpuSource, Tracker, make_source

log = logging.getLogger("rankzero.worker")


class HostWatch:
    def __init__(self, settings: Settings, gpus: list[str], source: GpuSource | None) -> None:
        self.settings, self.gpus, self.source = settings, gpus, source
        self.tracker = Tracker()
        self.faults: dict[str, str] | None = None  # as last written (None: not yet)

    def once(self) -> None:
        drained = hosts.drain_requested(self.settings)
        if drained != drain.host_drained(self.settings):
            log.warning("host %s %s", self.settings.resolved_host_name, "drained" if drained else "undrained")
        drain.set_host_drained(self.settings, drained)
        if self.source is None or not self.gpus:
            return
        faults = self.tracker.faults(self.source.read(self.gpus), self.settings.gpu_max_temp_c)
        if faults != self.faults:
            for gpu, why in faults.items():
                log.warning("GPU %s out of placement: %s", gpu, why)
            hosts.set_gpu_faults(self.settings, faults)
            self.faults = faults


def start_host_watch(settings: Settings, gpus: list[str], stop: threading.Event) -> threading.Thread:
    watch = HostWatch(settings, gpus, make_source(settings.gpu_health, settings.gpu_health_file))

    def loop() -> None:
        while True:
            try:
                watch.once()
            except Exception:  # the database may be restarting; the next look tries again
                log.warning("host watch failed", exc_info=True)
            if stop.wait(settings.heartbeat_s):
                return

    thread = threading.Thread(target=loop, name="rankzero-host-watch", daemon=True)
    thread.start()
    return thread
