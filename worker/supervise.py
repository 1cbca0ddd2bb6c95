"""Supervising one job from claim to outcome: the body of the Celery task.

wait for GPUs (in order) → claim (queued → starting) → launch torchrun → running
→ loop { ingest events, heartbeat, act on cancelling / drain / stall, notice exit } → outcome
"""

from __future__ import annotations

import logging
import signal
import socket
import time
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.exc import DBAPIError
from sqlmodel import Session

from core import jobs, queue
from core.capacity import gpus_needed, host_gpus
from core.db import get_engine
from core.settings import Settings
from core.tables import Checkpoint, JobStatus
from trainer.run_dir import RunDir, job_run_dir
from trainer.spec import JobSpec
from worker import cancel, drain, errors, gpus
from worker.ingest import EventTail, Ingestor
from worker.launch import Launched, launch

log = logging.getLogger("rankzero.worker")
S = JobStatus
STOPPED_EXIT = 75  # the trainer's "checkpointed after SIGTERM" exit code
FOLD_EVERY_S = 2.0
# Until the trainer's `started` event (imports, data download, rendezvous) the stall watchdog waits at
# least this long: stall_timeout_s is about training making no progress, not about a slow start.
STARTUP_GRACE_S = 600.0
# How long the outcome of an attempt is retried while the database is unreachable (e.g. restarting).
DB_RETRY_S = 600.0


def _fold_rollups(engine, job_id: int) -> None:
    """Fold new points into the API's min/max rollups now, so a chart read never pays for it."""
    try:
        from core import metric_rollup

        with Session(engine) as s:
            metric_rollup.refresh(s, job_id)
            s.commit()
    except Exception:  # a read folds whatever is left; never fail a job over a summary
        log.exception("job %s: folding metric rollups failed", job_id)


def _latest_checkpoint(engine, job_id: int, run: RunDir) -> Path | None:
    with Session(engine) as s:
        rows = s.execute(
            select(Checkpoint.path).where(Checkpoint.job_id == job_id).order_by(Checkpoint.step.desc())
        ).all()  # type: ignore[attr-defined]
    for (path,) in rows:
        if (run.root / path).is_file():
            return (run.root / path).resolve()
    return None


def run_job(job_id: int, settings: Settings) -> str:
    """Run job `job_id` if it is still queued; return a one-line account (for the worker log)."""
    engine = get_engine(settings.resolved_database_url)
    job = jobs.get_job(engine, job_id)
    if job is None:
        return f"job {job_id}: no such job"
    if job.status != S.queued:
        return f"job {job_id}: {job.status.value}, nothing to do (a repeated delivery)"
    try:
        spec = JobSpec.model_validate(job.spec)
    except ValueError as exc:  # stored by an older version, say: fail it rather than leave it queued
        jobs.refuse(engine, job_id, f"the stored spec is no longer valid: {exc}; resubmit it")
        return f"job {job_id}: invalid spec"
    host = host_gpus(settings)
    if spec.device == "cuda" and not host:
        jobs.refuse(
            engine,
            job_id,
            f"device 'cuda' but worker {socket.gethostname()} has no GPUs (RANKZERO_GPUS); use device 'cpu'",
        )
        return f"job {job_id}: refused, no GPUs"
    need = gpus_needed(spec, len(host))
    lease = None
    if need:
        if need > len(host):
            jobs.refuse(
                engine,
                job_id,
                f"the job needs {need} GPUs but worker {socket.gethostname()} has {len(host)}; lower nproc",
            )
            return f"job {job_id}: refused, too few GPUs"
        lease = gpus.acquire(
            settings, job_id, need, keep_waiting=lambda: jobs.touch_queued(engine, job_id), poll_s=settings.poll_s * 2
        )
        if lease is None:
            return f"job {job_id}: left the queue while waiting for GPUs"
    try:
        job = jobs.claim(engine, job_id, settings.resolved_runs_dir)
        if job is None:
            return f"job {job_id}: claimed by another delivery"
        cuda = lease.cuda_visible_devices if lease else ("" if host else None)
        return _run_attempt(engine, settings, job_id, job.attempt, spec, cuda)
    finally:
        if lease is not None:
            lease.release()


def _run_attempt(engine, settings: Settings, job_id: int, attempt: int, spec: JobSpec, cuda: str | None) -> str:
    run = RunDir(job_run_dir(settings.resolved_runs_dir, job_id))
    spec_dict = spec.model_dump(mode="json")
    if attempt > 1:
        latest = _latest_checkpoint(engine, job_id, run)
        if latest is not None:
            spec_dict["resume_from"] = str(latest)
    try:
        launched = launch(run, spec_dict, job_id, attempt, spec.nproc, cuda)
    except OSError as exc:
        jobs.finish(engine, job_id, S.failed, detail="launch failed", error=f"could not start torchrun: {exc}")
        return f"job {job_id}: launch failed"
    jobs.mark_running(engine, job_id, launched.proc.pid, detail=f"torchrun pid {launched.proc.pid}, attempt {attempt}")
    log.info("job %s attempt %s: torchrun pid %s on %s", job_id, attempt, launched.proc.pid, cuda or "cpu")
    return _supervise(engine, settings, job_id, attempt, spec, run, launched)


def _supervise(
    engine, settings: Settings, job_id: int, attempt: int, spec: JobSpec, run: RunDir, launched: Launched
) -> str:
    tail = EventTail(run.events)
    ingestor = Ingestor(engine, job_id, run.root)
    poll = settings.poll_s
    last_beat = last_event = last_fold = time.monotonic()
    launched_at = time.time()
    started = False  # this attempt's `started` event seen: the stall watchdog is armed
    pending: list[dict] = []  # events read but not yet written (the database may be down)
    stop_reason: str | None = None  # "cancel" | "drain" | "stall"
    exit_code: int | None = None
    while True:
        events = tail.read()
        if events:
            pending.extend(events)
            last_event = time.monotonic()
            started = started or any(
                e.get("type") == "started" and float(e.get("time", 0)) >= launched_at - 1 for e in events
            )
        exit_code = launched.proc.poll()
        if exit_code is not None:
            exit_code = cancel.wait_gone(launched.proc, launched.mark)
            break
        now = time.monotonic()
        try:
            if pending:
                new = ingestor.ingest(pending)
                pending = []
                if new and now - last_fold > FOLD_EVERY_S:
                    _fold_rollups(engine, job_id)
                    last_fold = now
            status = jobs.status_of(engine, job_id)
            if now - last_beat >= settings.heartbeat_s:
                jobs.touch_live(engine, job_id)
                last_beat = now
        except DBAPIError as exc:
            # The database is unreachable (restarting?): the ranks carry on, events wait in `pending`.
            log.warning("job %s: database unavailable, retrying (%s)", job_id, type(exc).__name__)
            status = S.running
        stall_limit = (
            spec.stall_timeout_s
            if started or spec.stall_timeout_s is None
            else max(spec.stall_timeout_s, STARTUP_GRACE_S)
        )
        if status == S.cancelling:
            stop_reason = "cancel"
        elif drain.draining(settings):
            stop_reason = "drain"
        elif stall_limit is not None and now - last_event > stall_limit:
            stop_reason = "stall"
        elif status is None or status.is_terminal:
            stop_reason = "gone"  # deleted or finished under us: do not leave ranks behind
        if stop_reason:
            grace = settings.cancel_grace_s if stop_reason != "stall" else min(settings.cancel_grace_s, 5.0)
            exit_code = cancel.stop(launched.proc, launched.mark, grace)
            break
        time.sleep(poll)
    pending.extend(tail.read())  # what the ranks wrote on their way out (final checkpoint, stopped, failed)
    deadline = time.monotonic() + DB_RETRY_S
    while True:
        try:
            ingestor.ingest(pending)
            _fold_rollups(engine, job_id)
            return _record(engine, settings, job_id, attempt, spec, run, launched, ingestor, exit_code, stop_reason)
        except DBAPIError:
            if time.monotonic() > deadline:
                raise
            log.warning("job %s: database unavailable while recording the outcome; retrying", job_id)
            time.sleep(2.0)


def _record(engine, settings, job_id, attempt, spec, run, launched, ingestor, exit_code, stop_reason) -> str:
    ev = ingestor.outcome
    if stop_reason == "cancel":
        jobs.finish(
            engine, job_id, S.cancelled, detail=f"cancelled; ranks stopped (exit {exit_code})", exit_code=exit_code
        )
        return f"job {job_id}: cancelled"
    if stop_reason == "gone":
        return f"job {job_id}: row left the live states; ranks stopped"
    if stop_reason == "drain":
        jobs.requeue(
            engine,
            job_id,
            detail="worker shutting down; the job resumes from its latest checkpoint",
            exit_code=exit_code,
        )
        queue.enqueue_or_defer(job_id, settings)
        return f"job {job_id}: handed back to the queue (worker shutting down)"
    if stop_reason is None and (exit_code == 0 or ev.finished):
        # After `finished` the final checkpoint and every event are on disk; a rank dying in process-group
        # teardown (seen: gloo aborting when its peer exits first) loses nothing, so it is only noted.
        detail = (
            "finished"
            if exit_code == 0
            else f"finished (a rank exited with {exit_code} during teardown, after the final checkpoint)"
        )
        if jobs.finish(engine, job_id, S.succeeded, detail=detail, exit_code=exit_code, eta_s=0.0):
            return f"job {job_id}: succeeded"
        return f"job {job_id}: finished but its row had moved on"
    if stop_reason == "stall":
        failure = errors.Failure(message=f"no event for {spec.stall_timeout_s:g} s (stall_timeout_s): a rank hung; its ranks were stopped",
                                 exit_code=exit_code)  # fmt: skip
    else:
        failure = errors.diagnose(run, attempt, launched.launcher_log, exit_code)
        if failure.rank is not None and failure.exit_code is not None and failure.exit_code < 0:
            # Killed by a signal: that rank wrote no error of its own, and rank 0's `failed` event
            # would only echo it (a broken connection), so torchrun's root cause names the rank.
            try:
                name = signal.Signals(-failure.exit_code).name
            except ValueError:
                name = f"signal {-failure.exit_code}"
            failure.message = (
                f"killed by {name} (out of memory, or killed from outside); torchrun stopped the other ranks"
            )
        elif ev.failed and ev.failed.get("error"):
            failure.message = str(ev.failed["error"])
            if isinstance(ev.failed.get("rank"), int):
                failure.rank = ev.failed["rank"]
            if ev.failed.get("traceback") and not failure.traceback:
                tb = ev.failed["traceback"]
                failure.traceback = tb if isinstance(tb, list) else str(tb).splitlines()
    if attempt <= spec.max_restarts:
        detail = f"attempt {attempt} failed ({failure.message}); restarting from the latest checkpoint ({attempt}/{spec.max_restarts} restarts)"
        if jobs.requeue(engine, job_id, detail=detail, failed_rank=failure.rank, exit_code=failure.exit_code):
            queue.enqueue_or_defer(job_id, settings)
            return f"job {job_id}: restarting"
    error = failure.text()
    latest = _latest_checkpoint(engine, job_id, run)
    if latest is not None:
        error += f"\nlatest intact checkpoint: {latest.relative_to(run.root.resolve())} (resubmit with resume_from set to it)"
    jobs.finish(engine, job_id, S.failed, detail=failure.message[:500], error=error,
                   failed_rank=failure.rank, exit_code=failure.exit_code)  # fmt: skip
    return f"job {job_id}: failed"
