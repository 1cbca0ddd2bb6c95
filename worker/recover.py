"""Recovering jobs whose worker died: the database row, not the broker, decides.

A live job (starting/running/cancelling) whose heartbeat is older than the stale threshold lost
its worker: it goes back to the queue to resume from its latest checkpoint while restarts remain
(spec.max_restarts), else it fails saying why; a lost `cancelling` job is simply cancelled. A
queued job a worker was holding (waiting for GPUs; heartbeat set) whose holder went silent is
dispatched again — with the embedded transport a consumed message is gone once its worker dies.
Every worker runs this on start and every so often; the conditional UPDATE makes concurrent
recoverers harmless.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timedelta, timezone

from sqlalchemy import or_, select, text
from sqlmodel import Session

from core import jobs, queue
from core.db import db_now, get_engine
from core.settings import Settings
from core.tables import Job, JobStatus
from trainer.spec import JobSpec
from worker import bundles

log = logging.getLogger("rankzero.worker")
S = JobStatus


def _aware(ts: datetime | None) -> datetime | None:
    if ts is not None and ts.tzinfo is None:
        return ts.replace(tzinfo=timezone.utc)  # SQLite hands back naive UTC
    return ts


EPOCH = datetime.fromtimestamp(0, timezone.utc)


def _stale(status: JobStatus, beat: datetime | None, cutoff: datetime) -> bool:
    if beat is None:
        # A live job without a heartbeat has not been started by anyone yet; a queued one without one
        # is a row from before dispatches were recorded: send it.
        return status == S.queued
    return beat <= cutoff


def recover_once(settings: Settings) -> list[int]:
    """One sweep; returns the ids of jobs it requeued, failed, cancelled or re-dispatched."""
    engine = get_engine(settings.resolved_database_url)
    now = db_now(engine)  # the database's clock judges every host's heartbeats
    cutoff = now - timedelta(seconds=settings.resolved_stale_after_s)
    # A queued job is sent again when nobody vouched for its message this long (lost, flushed broker).
    queued_cutoff = now - timedelta(seconds=settings.redispatch_after_s)
    touched: list[int] = []
    with Session(engine) as s:
        rows = s.execute(
            select(Job.id, Job.status, Job.heartbeat_at, Job.attempt, Job.spec).where(
                Job.status.in_([S.starting, S.running, S.cancelling, S.queued]),
                # Only this pool's jobs: another queue's workers judge (and rerun) their own.
                or_(Job.queue == settings.queue, Job.queue.is_(None)),
            )
        ).all()  # type: ignore[attr-defined]
    for job_id, status, raw_beat, attempt, spec in rows:
        beat = _aware(raw_beat)
        if not _stale(JobStatus(status), beat, queued_cutoff if status == S.queued else cutoff):
            continue
        beat = beat or EPOCH
        status = JobStatus(status)
        since = f"no heartbeat since {beat.isoformat(timespec='seconds')}"
        with Session(engine) as s:
            if status == S.queued:
                won = jobs.take_stale_queued(s, job_id, raw_beat)
                s.commit()
                if won:
                    queue.enqueue_or_defer(job_id, settings)
                    touched.append(job_id)
                continue
            if status == S.cancelling:
                won = jobs.transition(
                    s,
                    job_id,
                    S.cancelled,
                    expect=S.cancelling,
                    detail=f"worker lost while cancelling ({since})",
                    pid=None,
                )
            else:
                try:
                    restarts = JobSpec.model_validate(spec).max_restarts
                except ValueError:
                    restarts = 0
                if attempt <= restarts:
                    detail = f"worker lost ({since}); resuming from the latest checkpoint"
                    won = jobs.transition(
                        s, job_id, S.queued, expect=status, detail=detail, pid=None, heartbeat_at=None
                    )
                else:
                    msg = (
                        f"worker {since} (host or worker died); the job was not restarted because max_restarts "
                        f"is {restarts}: resubmit with resume_from set to its latest checkpoint, or set max_restarts"
                    )
                    won = jobs.transition(s, job_id, S.failed, expect=status, detail="worker lost", error=msg, pid=None)
            s.commit()
        if won:
            touched.append(job_id)
            log.warning("job %s: recovered (%s, was %s)", job_id, since, status.value)
            if status in (S.starting, S.running) and attempt <= restarts:
                queue.enqueue_or_defer(job_id, settings)
    return touched


def start_recovery_thread(settings: Settings, stop: threading.Event) -> threading.Thread:
    """Sweep now and then every stale-threshold/2 until `stop` is set (a daemon thread of the worker)."""
    stale = settings.resolved_stale_after_s
    interval = max(1.0, stale / 2)

    def loop() -> None:
        # Heartbeats only mean something while the database is reachable: after an outage every job
        # looks silent. So jobs are judged only once this sweeper has reached the database for a whole
        # stale period, by which time live supervisors have written their heartbeats again.
        healthy_since: float | None = None
        while not stop.is_set():
            try:
                if healthy_since is None:
                    with get_engine(settings.resolved_database_url).connect() as conn:
                        conn.execute(text("SELECT 1"))
                    healthy_since = time.monotonic()
                if time.monotonic() - healthy_since >= stale:
                    recover_once(settings)
                    bundles.sweep(settings)  # code bundle retention: throttled, never raises
            except Exception:  # the database may be restarting; the next sweep tries again
                healthy_since = None
                log.exception("recovery sweep failed; retrying in %.0f s", interval)
            stop.wait(interval)

    thread = threading.Thread(target=loop, name="rankzero-recovery", daemon=True)
    thread.start()
    return thread
