"""Node 0 of a placed job: claim it, launch an attempt, watch it, and write its outcome.

wait for GPUs → claim (queued → starting) → launch torchrun → running
→ loop { look (worker/watch.py) → stop_reason (worker/stop_reason.py) } → ranks ended
→ gather the facts → decide (worker/decide.py, pure) → apply (worker/outcome.py, the one write)

What the trainer's events said about the attempt is `EventsSeen` (worker/ingest_handlers.py), one of the facts.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError
from sqlmodel import Session, col

from core import hosts, jobs
from core.db import is_outage
from core.placement_record import JobPlacement
from core.settings import Settings
from core.tables import Job, JobStatus, JobTransition
from trainer.run_dir import RunDir, job_run_dir
from trainer.spec import JobSpec
from worker import artifact_shipping, bundles, drain, environments, errors, gpus, procs, rank_watch, run_record, sandbox
from worker.attempt import Attempt, Ended, Layout, Limits, StopReason
from worker.decide import (
    PORT_TAKEN_WORDS,
    Facts,
    Outcome,
    Standing,
    decide,
    failed_on_its_own,
    looks_finished,
    may_restart,
    names_checkpoint,
)
from worker.decide import restart_or_fail as decide_restart_or_fail
from worker.launch import launch, port_taken
from worker.launch_command import Topology, free_port, memory_limit_mb
from worker.outcome import apply
from worker.resume_fetch import ResumeUnavailable, provide_in_spec
from worker.sandbox_disk import RELEASE_WAIT_S, wait_released
from worker.stop_reason import grace_s, stop_note, stop_reason
from worker.user_paths import for_job, scrub
from worker.wakeups import Wakeups
from worker.watch import Watcher, fold_rollups, peer_window_s, silent_peer

log = logging.getLogger("rankzero.worker")
S = JobStatus
# How long the outcome of an attempt is retried while the database is unreachable (e.g. restarting).
DB_RETRY_S = 600.0


def topology(layout: Layout) -> Topology:
    """The torchrun topology (worker/launch.py) of a node laid out as `layout`."""
    return Topology(nproc=layout.nproc, nnodes=layout.nnodes, node_rank=layout.node_rank, endpoint=layout.endpoint)


def _still_placed(engine: Engine, job_id: int, placement_id: str) -> bool:
    job = jobs.get_job(engine, job_id)
    return bool(job and job.status == S.queued and job.placement_id == placement_id) and jobs.touch_queued(
        engine, job_id
    )


def claim_and_run(
    engine: Engine, settings: Settings, job: Job, spec: JobSpec, placed: JobPlacement, placement_id: str
) -> str:
    """Hold node 0's GPUs, claim the job for this placement, and run the attempt; return a one-line account."""
    job_id = job.id
    assert job_id is not None  # a row read from the database
    node = placed.nodes[0]
    try:
        lease = gpus.lease_node(settings, node, keep_waiting=lambda: _still_placed(engine, job_id, placement_id))
    except gpus.StoppedWaiting:
        return f"job {job_id}: left the queue while its GPUs were being released"
    try:
        several = len(placed.nodes) > 1
        endpoint = f"{node.address or settings.resolved_host_address}:{free_port()}" if several else None
        claimed = jobs.claim(
            engine,
            job_id,
            settings.resolved_runs_dir,
            host=settings.resolved_host_name,
            placement_id=placement_id,
            rendezvous=endpoint,
        )
        if claimed is None:
            return f"job {job_id}: claimed by another delivery"
        cuda = gpus.visible_devices(settings, lease)
        return _run_attempt(engine, settings, claimed, spec, cuda, Layout.of(spec, placed, 0, endpoint))
    finally:
        if lease is not None:
            lease.release()


# --- launching ----------------------------------------------------------------------------------


def _fail_before_launch(engine: Engine, settings: Settings, job_id: int, number: int, detail: str, error: str) -> None:
    """Nothing runs yet: the job fails saying why, with no path of the worker's in it (worker/user_paths.py)."""
    error = scrub(error, for_job(settings, job_id)) or error
    jobs.finish(engine, job_id, S.failed, detail=detail, attempt=number, error=error)


def _run_attempt(engine: Engine, settings: Settings, job: Job, spec: JobSpec, cuda: str | None, layout: Layout) -> str:
    """Launch attempt `job.attempt` of a claimed job (node 0) and supervise it to its outcome."""
    job_id, number = job.id, job.attempt
    assert job_id is not None  # a claimed row
    run = RunDir(job_run_dir(settings.resolved_runs_dir, job_id))
    spec_dict = layout.spec_for_ranks(spec.model_dump(mode="json"))
    try:
        if number > 1:  # it may have run on a host that uploads: its record and checkpoint come from the store
            artifact_shipping.fetch_for_resume(engine, settings, job_id, run)
        latest = _before_launch(engine, settings, job_id, number, run)
        if latest is None or spec.is_script:  # the checkpoint it was resumed from, found or fetched here
            provide_in_spec(engine, settings, spec_dict, optional=latest is not None)
    except jobs.FencedOut as exc:
        return str(exc)
    except ResumeUnavailable as exc:  # never a silent start from scratch
        _fail_before_launch(engine, settings, job_id, number, "checkpoint unavailable", str(exc))
        return f"job {job_id}: checkpoint unavailable"
    except Exception as exc:  # nothing runs yet: the job fails saying why, never stays `starting`
        log.exception("job %s attempt %s: preparing the launch failed", job_id, number)
        error = f"the worker could not prepare attempt {number}: {type(exc).__name__}: {exc}"
        _fail_before_launch(engine, settings, job_id, number, "worker error", error)
        return f"job {job_id}: worker error before launch"
    if latest is not None and not spec.is_script:  # a script finds its own (rankzero.load_checkpoint)
        spec_dict["resume_from"] = str(latest)
    try:
        # Fetching or unpacking a large bundle may outlast the stale threshold: keep the job's heartbeat.
        code = bundles.code_dir(spec, settings, keep_alive=lambda: jobs.touch_live(engine, job_id, number))
        # The job's own packages (issue 28): resolved once per job, built once per host; uv's output in its log.
        ready = environments.for_attempt(engine, settings, job_id, number, spec, run, code,
                                         keep_alive=lambda: jobs.touch_live(engine, job_id, number))  # fmt: skip
        launched = launch(run, spec_dict, job_id, number, topology(layout), cuda, settings, code_dir=code,
                          keep_alive=lambda: jobs.touch_live(engine, job_id, number),
                          environment=ready.root if ready is not None else None)  # fmt: skip
    except bundles.BundleUnavailable as exc:
        _fail_before_launch(engine, settings, job_id, number, "code bundle unavailable", str(exc))
        return f"job {job_id}: code bundle unavailable"
    except environments.EnvironmentFailed as exc:  # the job's requirements: never a host loss, nor a restart
        _fail_before_launch(engine, settings, job_id, number, "preparing the environment failed", str(exc))
        return f"job {job_id}: environment failed"
    except OSError as exc:
        error = f"could not start torchrun: {exc}"
        _fail_before_launch(engine, settings, job_id, number, "launch failed", error)
        return f"job {job_id}: launch failed"
    pid = launched.proc.pid
    artifact_shipping.start_for_attempt(settings, job_id, number, run)  # a host without the API's runs dir
    warned = f"; {launched.warning}" if launched.warning else ""  # the job page shows it (sandbox off)
    warned += f"; {ready.summary()}" if ready is not None else ""
    warned += f"; {launched.disk_limit}" if launched.disk_limit else ""  # ENOSPC at the limit, or sampled (and why)
    jobs.mark_running(engine, job_id, pid, detail=f"torchrun pid {pid}, attempt {number}{_where(layout, spec)}{warned}",
                      attempt=number)  # fmt: skip
    log.info("job %s attempt %s: torchrun pid %s on %s", job_id, number, pid, cuda or "cpu")
    attempt = Attempt(
        engine, settings, job_id, number, spec, run, launched.proc, launched.mark, launched.launcher_log, layout,
        int(job.restarts_used), int(job.host_losses),
    )  # fmt: skip
    return supervise(attempt)


def _where(layout: Layout, spec: JobSpec) -> str:
    """The timeline's account of how the attempt runs: its other hosts, and an elastic fit."""
    parts = []
    if layout.peers:
        parts.append(f"{layout.nnodes} nodes (with {', '.join(layout.peers)})")
    if layout.nproc != spec.nproc and not spec.is_script:
        parts.append(f"running on {layout.nproc} of {spec.nproc} ranks (accumulation ×{layout.accumulation_steps})")
    return "; " + "; ".join(parts) if parts else ""


def _before_launch(engine: Engine, settings: Settings, job_id: int, number: int, run: RunDir) -> Path | None:
    """Never two attempts at once, and nothing an earlier one wrote is lost: stop whatever an earlier
    attempt left running (its ranks checkpoint on SIGTERM), ingest what events.jsonl holds (the durable
    record; its supervisor may have died before writing it), and return the newest intact checkpoint on
    disk to resume from (None for a first attempt, or when there is none)."""
    # A first attempt has no earlier one to stop: skip the scan of every process's environment (tens of ms
    # on a busy host, on the way to the job's first line).
    left = procs.stop_earlier_attempts(
        run.root,
        settings.cancel_grace_s,
        keep_alive=lambda: jobs.touch_live(engine, job_id, attempt=number),
        attempt=number,
    ) if number > 1 else []  # fmt: skip
    if left:
        log.warning(
            "job %s attempt %s: stopped %d process(es) an earlier attempt left running", job_id, number, len(left)
        )
    run_record.catch_up(engine, job_id, run, number)
    return run_record.newest_intact_checkpoint(engine, job_id, run) if number > 1 else None


# --- supervising --------------------------------------------------------------------------------


def supervise(a: Attempt) -> str:
    """Watch the attempt until its ranks exit or must be stopped, then write its outcome.

    A supervisor that was replaced (the row is a later attempt's: it was frozen, or cut off, and
    recovery gave the job to another worker) stops its ranks and writes nothing; any other error
    stops the ranks and records why, so no rank ever trains unsupervised."""
    watch: Watcher | None = None
    try:
        watch = Watcher(a)
        ended = _watch_until_ended(watch)
        watch.read_events()  # what the ranks wrote on their way out (final checkpoint, stopped, failed)
        rank_watch.final(watch.ranks)  # every rank's last step and step times, on the job row
        # A host that uploads: the last of its files reach the store before the job reads ended.
        artifact_shipping.finish(a.job_id, a.number, keep_alive=_keep_alive(a))
        # Its disk-limit filesystem (worker/sandbox_disk.py) is copied back by the sandbox's own thread: the
        # outcome (a requeue another host may start at once, from the run dir underneath) waits for that.
        if not wait_released(a.mark, RELEASE_WAIT_S):
            log.error("job %s attempt %s: its filesystem was not given back in time", a.job_id, a.number)
        return _record_outcome(a, watch, ended)
    except jobs.FencedOut:
        return _fenced_out(a)
    except Exception as exc:
        return _supervisor_failed(a, exc)
    finally:
        attempt_ended(a, watch)


def attempt_ended(a: Attempt, watch: Watcher | None) -> None:
    """The one place node 0's attempt ends, whatever its outcome (its ranks are gone by now): release
    what the attempt held on this host beyond its processes."""
    if watch is not None:
        watch.resources.close()
    artifact_shipping.finish(a.job_id, a.number)  # the last of its logs, checkpoints and outputs


def _watch_until_ended(watch: Watcher) -> Ended:
    """Look at the attempt whenever something wakes the supervisor (worker/wakeups.py: the ranks' exit, a
    commit on a job row, events written, a deadline) until its ranks exit on their own, or stop them when
    what was seen says so."""
    a = watch.a
    wakeups = Wakeups(a.proc, a.engine, files=[a.run.events], fallback_s=a.settings.poll_s)
    began = time.monotonic()
    try:
        return _look_until_ended(watch, wakeups)
    finally:
        # The count of waits is the mechanism tests/perf/test_supervisor_wakeups.py bounds (not a time).
        log.info("job %s attempt %s: supervisor woke %d times in %.0f s", a.job_id, a.number, wakeups.count,
                 time.monotonic() - began)  # fmt: skip
        wakeups.close()


def _look_until_ended(watch: Watcher, wakeups: Wakeups) -> Ended:
    a = watch.a
    limits = Limits(a.number, a.spec.stall_timeout_s, a.settings.startup_timeout_s, a.settings.finished_linger_s)
    cadence = wakeups.cadence
    files_due = row_due = 0.0  # monotonic: when the files (events, heartbeat, logs, samples) and the row are next read
    files_read_at = -cadence.files_gap_s
    while True:
        now = time.monotonic()
        fresh = now >= min(files_due, watch.due())
        if fresh:
            watch.read_events()
            files_read_at, files_due = now, now + cadence.scan_s
        if a.proc.poll() is not None:
            return Ended(procs.wait_gone(a.proc, a.mark))
        read_row = now >= row_due
        seen = watch.look(now, read_row=read_row)
        row_due = now + cadence.row_s if read_row else row_due
        reason = stop_reason(seen, limits)
        if reason is StopReason.stall and not fresh:  # judged on signs of life up to a scan old: read them now
            watch.read_events()
            files_read_at, files_due = now, now + cadence.scan_s
            seen = watch.look(now, read_row=False)
            reason = stop_reason(seen, limits)
        if reason is StopReason.replaced:
            raise jobs.FencedOut(a.job_id, a.number)
        if reason is StopReason.lingered:  # which process held the teardown up: the next bug report's first line
            log.warning("job %s attempt %s: finished %.0f s ago, still running: %s", a.job_id, a.number,
                        seen.finished_s or 0.0, procs.describe(procs.pids_with_mark(a.mark)))  # fmt: skip
        if reason is not None:
            note = drain.why(a.settings) if reason is StopReason.drain else stop_note(reason, seen, limits)
            note = rank_watch.on_stall(a, note) if reason is StopReason.stall else note  # which rank, its stacks
            code = procs.stop(a.proc, a.mark, grace_s(a.settings.cancel_grace_s, reason), _keep_alive(a))
            return Ended(code, reason, note)
        until = max(min(files_due, row_due, watch.due()), now + cadence.floor_s)  # a beat the database refused
        woken = wakeups.wait(until, files_from=files_read_at + cadence.files_gap_s)
        files_due = 0.0 if woken.files else files_due
        row_due = 0.0 if woken.row else row_due


def _keep_alive(a: Attempt) -> Callable[[], object]:
    """The job's heartbeat while its ranks checkpoint on their way out; never raises (the database may be down)."""

    def beat() -> object:
        try:
            return jobs.touch_live(a.engine, a.job_id, attempt=a.number)
        except DBAPIError:
            return False

    return beat


def _fenced_out(a: Attempt) -> str:
    code = procs.stop(a.proc, a.mark, a.settings.cancel_grace_s)
    log.warning(
        "job %s: attempt %s was replaced by a later attempt; its ranks stopped (exit %s)", a.job_id, a.number, code
    )
    return f"job {a.job_id}: attempt {a.number} replaced by a later attempt; ranks stopped, nothing written"


def _supervisor_failed(a: Attempt, exc: Exception) -> str:
    """An unexpected error in supervision: stop the ranks (they checkpoint), then fail or restart the job
    saying what went wrong, fenced like every other write."""
    log.exception("job %s attempt %s: supervision failed; stopping its ranks", a.job_id, a.number)
    code = procs.stop(a.proc, a.mark, a.settings.cancel_grace_s)
    message = f"the worker's supervisor failed ({type(exc).__name__}: {exc}); the ranks were stopped"
    try:
        _check_fence(a)
        failure = errors.Failure(message=message[:2000], exit_code=code)
        peer_lost = _peer_lost_during(a)
        _give_up(a, peer_lost)
        outcome = decide_restart_or_fail(_standing(a), failure, peer_lost, None)
        if names_checkpoint(outcome):
            outcome = decide_restart_or_fail(_standing(a), failure, peer_lost, _latest_checkpoint(a))
        return apply(a.engine, a.job_id, a.number, outcome)
    except Exception:  # the database too: recovery finds the job by its stale heartbeat
        log.exception("job %s: recording the supervisor's failure failed", a.job_id)
        return f"job {a.job_id}: supervisor failed; ranks stopped, outcome not recorded"


def _check_fence(a: Attempt) -> None:
    """Raise FencedOut when the row is another attempt's (read before writing an outcome)."""
    status, attempt = jobs.status_and_attempt(a.engine, a.job_id)
    if status is not None and attempt != a.number:
        raise jobs.FencedOut(a.job_id, a.number)


# --- the outcome --------------------------------------------------------------------------------


def _record_outcome(a: Attempt, watch: Watcher, ended: Ended) -> str:
    """Write the last events and the outcome, retrying for DB_RETRY_S while the database is unreachable."""
    deadline = time.monotonic() + DB_RETRY_S
    while True:
        try:
            watch.write_pending()
            fold_rollups(a.engine, a.job_id)
            _check_fence(a)
            return apply(a.engine, a.job_id, a.number, _decide(a, watch, ended))
        except DBAPIError as exc:
            if time.monotonic() > deadline or not is_outage(exc):
                raise
            log.warning("job %s: database unavailable while recording the outcome; retrying", a.job_id)
            time.sleep(2.0)


def _killed_at_the_limit(a: Attempt, failure: errors.Failure) -> errors.Failure:
    """The kernel may kill a process at the cgroup's memory limit before a sample sees the job over it: then
    the failure says so first (torchrun's own account, a SIGKILL, names no cause)."""
    killed = sandbox.oom_kills(a.mark)
    if killed:
        limit = memory_limit_mb(a.spec.model_dump(mode="json"), a.settings)
        failure.message = (
            f"over its memory_limit_mb {limit} MiB: the kernel killed {killed} of its processes at the limit "
            f"(raise memory_limit_mb, or use less memory); {failure.message}"
        )
    return failure


def _decide(a: Attempt, watch: Watcher, ended: Ended) -> Outcome:
    """Gather what the decision needs (only what its path reads: a peer's verdict may take seconds), then decide."""
    seen = watch.ingestor.seen
    # A script writes its own events (the SDK runs in its process): its `finished` cannot excuse a non-zero
    # exit. Only the built-in trainer's `finished` vouches for a noisy teardown after the final checkpoint.
    finished = seen.finished and not a.spec.is_script
    facts = Facts(
        finished=finished,
        failed_event=seen.failed,
        diagnosed=_killed_at_the_limit(a, errors.diagnose(a.run, a.number, a.launcher_log, ended.exit_code))
        if failed_on_its_own(ended, finished)
        else None,
        trouble=run_record.run_dir_trouble(a.run) if failed_on_its_own(ended, finished) else None,
        hole=run_record.hole_in_record(a.run, expect_finished=not a.spec.is_script)
        if looks_finished(ended, finished)
        else None,
        peer_lost=_peer_lost_during(a) if may_restart(ended, finished) else None,
        preempt_for=jobs.live_view(a.engine, a.job_id)[2] if ended.stopped_for is StopReason.preempt else None,
        port_taken=a.layout.nnodes > 1
        and failed_on_its_own(ended, finished)
        and port_taken(a.launcher_log, a.run.root),
    )
    _give_up(a, ended.note if ended.stopped_for is StopReason.host_lost else facts.peer_lost)
    standing = _standing(a, ports_taken=_ports_taken_before(a) if facts.port_taken else 0)
    outcome = decide(standing, ended, facts)
    if names_checkpoint(outcome):  # hashing checkpoints costs time: only for an error that names one
        outcome = decide(standing, ended, dataclasses.replace(facts, latest_checkpoint=_latest_checkpoint(a)))
    return outcome


def _standing(a: Attempt, ports_taken: int = 0) -> Standing:
    return Standing(
        a.number, a.restarts_used, a.spec.max_restarts, a.host_losses, a.settings.max_host_losses,
        ports_taken=ports_taken, job_id=a.job_id,
    )  # fmt: skip


def _ports_taken_before(a: Attempt) -> int:
    """How many earlier attempts of the job were requeued for a taken port (their timeline lines say so)."""
    with Session(a.engine) as s:
        found = s.execute(
            select(func.count())
            .select_from(JobTransition)
            .where(
                col(JobTransition.job_id) == a.job_id,
                col(JobTransition.status) == S.queued,
                col(JobTransition.detail).contains(PORT_TAKEN_WORDS),
            )
        ).scalar_one()
    return int(found)


def _latest_checkpoint(a: Attempt) -> str | None:
    """The newest intact checkpoint to resume from, relative to the run dir (named in a failed job's error)."""
    latest = run_record.newest_intact_checkpoint(a.engine, a.job_id, a.run)
    return str(latest.relative_to(a.run.root.resolve())) if latest is not None else None


def _give_up(a: Attempt, host: str | None) -> None:
    """A peer host node 0 gave up reads as dead until it heartbeats anew: the job is not placed back on it."""
    if host and hosts.give_up(a.engine, host, peer_window_s(a.settings)):
        log.warning("job %s: gave up host %s; nothing is placed on it until it heartbeats again", a.job_id, host)


def _peer_lost_during(a: Attempt) -> str | None:
    """For a multi-node attempt whose ranks failed: did another node's host die (its ranks' loss broke
    ours)? Its heartbeat tells within a few beats; wait that long for the verdict."""
    if not a.layout.peers:
        return None
    deadline = time.monotonic() + peer_window_s(a.settings) + a.settings.heartbeat_s
    while True:
        silent = silent_peer(a)
        if silent is not None or time.monotonic() >= deadline:
            return silent
        time.sleep(min(1.0, a.settings.heartbeat_s))
