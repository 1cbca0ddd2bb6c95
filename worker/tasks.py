"""Celery tasks. The task body only forwards the job id to the supervisor."""

from __future__ import annotations

from celery.exceptions import Reject

from core import wake
from core.queue import TASK_RUN_NODE
from worker import drain
from worker.celery_app import app


@app.task(name=TASK_RUN_NODE, bind=True, acks_late=True)
def run_node(self, job_id: int, node_rank: int, placement_id: str) -> str:
    from worker.supervise import run_node as supervise_node

    settings = self.app.conf.rankzero_settings
    if drain.draining(settings):
        # The message names this host: give it back; the scheduler places the job again if we leave.
        raise Reject("worker shutting down", requeue=True)
    try:
        return supervise_node(int(job_id), int(node_rank), str(placement_id), settings)
    finally:
        wake.notify(settings)  # this node's capacity is free: the scheduler places what waits, now
