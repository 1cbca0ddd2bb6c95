"""A worker's watch over its own host, every heartbeat_s: an operator's drain (the host row → the flag
its supervisors read: worker/drain.py) and its GPUs' health (worker/gpu_health.py → the host row, so the
scheduler leaves a failing GPU out)."""

from __future__ import annotations

import logging
import threading

from sqlalchemy import select
from sqlmodel import Session, col

from core import hosts, jobs
from core.db import get_engine
from core.job_state import HOLDING
from core.placement_record import BadPlacement, read_placement
from core.settings import Settings
from core.tables import Job
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
        drain.sweep_dead_flags(self.settings)  # flags of workers never restarted (issue 20)
        if self.source is None or not self.gpus:
            return
        faults = self.tracker.faults(self.source.read(self.gpus), self.settings.gpu_max_temp_c)
        if faults != self.faults:
            for gpu, why in faults.items():
                log.warning("GPU %s out of placement: %s", gpu, why)
            hosts.set_gpu_faults(self.settings, faults)
            new = {g: why for g, why in faults.items() if g not in (self.faults or {})}
            self.faults = faults
            self.note_jobs(new)

    def note_jobs(self, new_faults: dict[str, str]) -> None:
        """Say in the timeline of each job placed on a newly failing GPU of this host that it failed (its
        own errors, if any, may be the GPU's)."""
        if not new_faults:
            return
        engine = get_engine(self.settings.resolved_database_url)
        name = self.settings.resolved_host_name
        with Session(engine) as s:
            rows = s.execute(
                select(col(Job.id), col(Job.placement)).where(
                    col(Job.status).in_(list(HOLDING)), col(Job.placement).isnot(None)
                )
            ).all()
        for job_id, placed in rows:
            try:
                record = read_placement(placed)
            except BadPlacement:
                continue
            held = {g for n in (record.nodes if record else ()) if n.host == name for g in n.gpus}
            for gpu in sorted(held & set(new_faults)):
                jobs.note(engine, job_id, f"GPU {gpu} of host {name} failed its health check: {new_faults[gpu]}")


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
