"""Recovering jobs whose worker died: the database row, not the broker, decides.

A live job (starting/running/cancelling) whose heartbeat is older than the stale threshold lost
its worker's host: not the job's fault, so it goes back to the queue to resume from its latest
checkpoint without spending spec.max_restarts, at most settings.max_host_losses times (a job that
kills its hosts is then failed, saying so); a lost `cancelling` job is simply cancelled. A queued
job placed on a host that never started it (its message lost, its worker gone while holding it)
is handed back to the scheduler to be placed again.
Every worker runs this on start and every so often; the conditional UPDATE makes concurrent
recoverers harmless.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timedelta, timezone

from sqlalchemy import or_, select, text
from sqlmodel import Session, col

from core import jobs
from core.db import db_now, get_engine
from core.settings import Settings
from core.tables import Job, JobStatus
from trainer.run_dir import RunDir, job_run_dir
from worker import bundles, run_record
from worker.decide import Requeue, Standing, host_loss

log = logging.getLogger("rankzero.worker")
S = JobStatus


def _aware(ts: datetime | None) -> datetime | None:
    if ts is not None and ts.tzinfo is None:
        return ts.replace(tzinfo=timezone.utc)  # SQLite hands back naive UTC
    return ts


EPOCH = datetime.fromtimestamp(0, timezone.utc)


def _stale(status: JobStatus, stamp: datetime | None, cutoff: datetime) -> bool:
    """A live job's heartbeat, or a placed queued job's `vouched_at`, older than `cutoff`."""
    if stamp is None:
        # A live job without a heartbeat has not been started by anyone yet; a placed queued one never
        # vouched for is a row from before placements were vouched for: place it again.
        return status == S.queued
    return stamp <= cutoff


def recover_once(settings: Settings) -> list[int]:
    """One sweep; returns the ids of jobs it requeued, failed, cancelled or re-dispatched."""
    engine = get_engine(settings.resolved_database_url)
    now = db_now(engine)  # the database's clock judges every host's heartbeats
    cutoff = now - timedelta(seconds=settings.resolved_stale_after_s)
    # A placed queued job is placed again when nobody vouched for it this long (its node message lost, in a
    # flushed broker, or its worker gone while holding it).
    queued_cutoff = now - timedelta(seconds=settings.redispatch_after_s)
    touched: list[int] = []
    columns = (col(Job.id), col(Job.status), col(Job.heartbeat_at), col(Job.vouched_at), col(Job.host_losses),
               col(Job.worker_host))  # fmt: skip
    with Session(engine) as s:
        rows = s.execute(
            select(*columns).where(
                or_(
                    col(Job.status).in_([S.starting, S.running, S.cancelling]),
                    (col(Job.status) == S.queued) & col(Job.placement_id).isnot(None),  # unplaced: the scheduler's
                ),
                # Only this pool's jobs: another queue's workers judge (and rerun) their own.
                or_(col(Job.queue) == settings.queue, col(Job.queue).is_(None)),
            )
        ).all()
    for job_id, status, live_beat, vouched, losses, host in rows:
        raw_beat = vouched if status == S.queued else live_beat
        beat = _aware(raw_beat)
        if not _stale(JobStatus(status), beat, queued_cutoff if status == S.queued else cutoff):
            continue
        beat = beat or EPOCH
        status = JobStatus(status)
        since = f"{lost_host(host)}no heartbeat since {beat.isoformat(timespec='seconds')}"
        with Session(engine) as s:
            if status == S.queued:
                won = jobs.take_stale_queued(s, job_id, raw_beat)
                s.commit()
                if won and jobs.unplace(engine, job_id, reason=f"its host did not start it ({since}); placing again"):
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
                won = _resume_or_fail(s, job_id, status, losses, since, settings)
            s.commit()
        if won:
            touched.append(job_id)
            log.warning("job %s: recovered (%s, was %s)", job_id, since, status.value)
    return touched


def lost_host(worker_host: str | None) -> str:
    """The host whose worker went silent, named (issue 35): node 0's, the one that heartbeats the job ("host a: ")."""
    first = (worker_host or "").split(",")[0].strip()
    return f"host {first}: " if first else ""


def _resume_or_fail(s: Session, job_id: int, status: JobStatus, losses: int, since: str, settings: Settings) -> bool:
    """A live job whose worker went silent: its host was lost. The same decision as node 0's for a lost
    peer (worker/decide.py `host_loss`): resume it (not a restart of the job's own failure), unless it has
    lost its host max_host_losses times already."""
    standing = Standing(attempt=0, host_losses=losses, max_host_losses=settings.max_host_losses, job_id=job_id)
    latest = _latest_checkpoint(settings, job_id) if losses >= settings.max_host_losses else None
    outcome = host_loss(f"worker lost ({since})", standing, exit_code=None, latest=latest)
    if isinstance(outcome, Requeue):
        return jobs.transition(
            s, job_id, S.queued, expect=status, detail=outcome.detail, pid=None, heartbeat_at=None,
            host_losses=Job.host_losses + 1, **jobs.UNPLACED,
        )  # fmt: skip
    return jobs.transition(s, job_id, S.failed, expect=status, detail=outcome.detail, error=outcome.error, pid=None)


def _latest_checkpoint(settings: Settings, job_id: int) -> str | None:
    """The checkpoint a failed job's error tells the user to resume from (relative to its run dir)."""
    run = RunDir(job_run_dir(settings.resolved_runs_dir, job_id))
    latest = run_record.newest_intact_checkpoint(get_engine(settings.resolved_database_url), job_id, run)
    return str(latest.relative_to(run.root.resolve())) if latest is not None else None


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
