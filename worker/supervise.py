"""Supervising one job from claim to outcome: the body of the Celery task.

wait for GPUs (in order) → claim (queued → starting) → launch torchrun → running
→ loop { ingest events, heartbeat, act on cancelling / drain / stall, notice exit } → outcome

"Outcome" is what this module writes to the job row (through core.jobs); what the trainer's events
said about the attempt is `EventsSeen` (worker/ingest.py), one of the things the outcome is read from.
"""

from __future__ import annotations

import logging
import signal
import time
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError
from sqlmodel import Session

from core import code_policy, hosts, jobs, queue
from core.db import get_engine
from core.settings import Settings
from core.tables import Checkpoint, Job, JobStatus
from trainer.event_types import EventType
from trainer.exit_codes import EXIT_OK
from trainer.run_dir import RunDir, job_run_dir
from trainer.spec import JobSpec
from worker import bundles, cancel, drain, errors, gpus, run_record, script_jobs
from worker.ingest import EventsSeen, EventTail, Ingestor
from worker.launch import Launched, Topology, free_port, launch
from worker.resources import ResourceWatch
from worker.tensorboard import TensorBoardTail

log = logging.getLogger("rankzero.worker")
S = JobStatus
FOLD_EVERY_S = 2.0
# How long the outcome of an attempt is retried while the database is unreachable (e.g. restarting).
DB_RETRY_S = 600.0


@dataclass(frozen=True)
class Attempt:
    """One launched attempt of a job: what every step of its supervision needs."""

    engine: Engine
    settings: Settings
    job_id: int
    number: int  # 1 for the first attempt; the row's `attempt`
    spec: JobSpec
    run: RunDir
    launched: Launched
    layout: Layout
    restarts_used: int = 0  # failures already restarted (spec.max_restarts bounds them)
    host_losses: int = 0  # resumes after a lost host (settings.max_host_losses bounds them)


@dataclass(frozen=True)
class Layout:
    """How the scheduler placed this attempt: the torchrun topology of this node, the accumulation the
    ranks use (raised by elastic fit), and the other nodes' hosts (node 0 watches them)."""

    topology: Topology
    accumulation_steps: int
    peers: tuple[str, ...] = ()
    gpus: tuple[str, ...] = ()  # this node's leased GPUs (sampled as sys/gpu<i>/...)

    @classmethod
    def single(cls, spec: JobSpec) -> Layout:
        return cls(Topology(nproc=spec.nproc), spec.accumulation_steps)

    @classmethod
    def of(cls, spec: JobSpec, placed: dict[str, Any] | None, node_rank: int, endpoint: str | None) -> Layout:
        if not placed:
            return cls.single(spec)
        nodes = placed.get("nodes", [])
        topo = Topology(
            nproc=int(placed.get("nproc", spec.nproc)), nnodes=len(nodes), node_rank=node_rank, endpoint=endpoint
        )
        peers = tuple(str(n["host"]) for n in nodes if int(n["node_rank"]) != node_rank)
        gpus = tuple(str(g) for g in nodes[node_rank].get("gpus", [])) if node_rank < len(nodes) else ()
        return cls(topo, int(placed.get("accumulation_steps", spec.accumulation_steps)), peers, gpus)

    def spec_for_ranks(self, spec_dict: dict[str, Any]) -> dict[str, Any]:
        """The spec the ranks read: with elastic fit, the ranks and accumulation they really run with
        (the global batch, and so the weights, unchanged)."""
        if self.topology.nproc != spec_dict.get("nproc") and spec_dict.get("entrypoint") is None:
            return {**spec_dict, "nproc": self.topology.nproc, "accumulation_steps": self.accumulation_steps,
                    "min_nproc": None}  # fmt: skip
        return spec_dict


class StopReason(str, Enum):
    """Why the worker stopped the ranks itself (None: they exited on their own)."""

    cancel = "cancel"  # the row went to `cancelling`
    drain = "drain"  # this worker is shutting down
    stall = "stall"  # no sign of life for stall_timeout_s (or startup_timeout_s before the first)
    gone = "gone"  # the row was deleted or finished under us: do not leave ranks behind
    memory = "memory"  # the job's processes use more memory than its limit (worker/resources.py)
    preempt = "preempt"  # the scheduler needs our place for a higher-priority job: checkpoint, requeue
    host_lost = "host_lost"  # another node's host went silent: stop every node, resume elsewhere


@dataclass(frozen=True)
class Ended:
    """How the ranks' processes ended: torchrun's exit code, and why we stopped them, if we did."""

    exit_code: int | None
    stopped_for: StopReason | None = None
    note: str = ""  # for a stall: what the watchdog saw (which phase, how long), in words


def _fold_rollups(engine: Engine, job_id: int) -> None:
    """Fold new points into the API's min/max rollups now, so a chart read never pays for it."""
    try:
        from core import metric_rollup

        with Session(engine) as s:
            metric_rollup.refresh(s, job_id)
            s.commit()
    except Exception:  # a read folds whatever is left; never fail a job over a summary
        log.exception("job %s: folding metric rollups failed", job_id)


def _latest_checkpoint(engine: Engine, job_id: int, run: RunDir) -> Path | None:
    with Session(engine) as s:
        rows = s.execute(
            select(Checkpoint.path).where(Checkpoint.job_id == job_id).order_by(Checkpoint.step.desc())
        ).all()  # type: ignore[attr-defined]
    for (path,) in rows:
        if (run.root / path).is_file():
            return (run.root / path).resolve()
    return None


def _runnable_spec(engine: Engine, job: Job, settings: Settings) -> JobSpec | str:
    """The job's spec, or (having failed the job) a one-line account of why this worker will not run it."""
    try:
        spec = JobSpec.model_validate(job.spec)
    except ValueError as exc:  # stored by an older version, say: fail it rather than leave it queued
        jobs.refuse(engine, job.id, f"the stored spec is no longer valid: {exc}; resubmit it")
        return f"job {job.id}: invalid spec"
    refusal = code_policy.user_code_refusal(spec, settings)  # the allow-list may have changed since submit
    if refusal is not None:
        jobs.refuse(engine, job.id, f"refused by this worker: {refusal[1]}")
        return f"job {job.id}: refused, user code not allowed"
    return spec


def run_job(job_id: int, settings: Settings) -> str:
    """A message of the service before the scheduler: the scheduler places the job now (a no-op)."""
    return f"job {job_id}: left to the scheduler (a message from before placement)"


def run_node(job_id: int, node_rank: int, placement_id: str, settings: Settings) -> str:
    """Run node `node_rank` of job `job_id` as the scheduler placed it; return a one-line account.

    Node 0 claims the job and supervises it (events, outcome); the other nodes follow it
    (worker/follower.py). A message for a placement the row no longer holds is a no-op."""
    engine = get_engine(settings.resolved_database_url)
    job = jobs.get_job(engine, job_id)
    if job is None:
        return f"job {job_id}: no such job"
    if job.placement_id != placement_id or not job.placement:
        return f"job {job_id}: placement {placement_id[:8]} is no longer the job's; nothing to do"
    if node_rank > 0:
        from worker import follower

        return follower.run_follower(engine, settings, job_id, node_rank, placement_id)
    if job.status != S.queued:
        return f"job {job_id}: {job.status.value}, nothing to do (a repeated delivery)"
    spec = _runnable_spec(engine, job, settings)
    if isinstance(spec, str):
        return spec
    return _claim_node_zero(engine, settings, job, spec, placement_id)


def _still_placed(engine: Engine, job_id: int, placement_id: str) -> bool:
    job = jobs.get_job(engine, job_id)
    return bool(job and job.status == S.queued and job.placement_id == placement_id) and jobs.touch_queued(
        engine, job_id
    )


def _claim_node_zero(engine: Engine, settings: Settings, job: Job, spec: JobSpec, placement_id: str) -> str:
    job_id, placed = job.id, dict(job.placement or {})
    node = placed["nodes"][0]
    try:
        lease = gpus.lease_node(settings, node, keep_waiting=lambda: _still_placed(engine, job_id, placement_id))
    except gpus.StoppedWaiting:
        return f"job {job_id}: left the queue while its GPUs were being released"
    try:
        several = len(placed["nodes"]) > 1
        endpoint = f"{node.get('address') or settings.resolved_host_address}:{free_port()}" if several else None
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


def _run_attempt(engine: Engine, settings: Settings, job: Job, spec: JobSpec, cuda: str | None, layout: Layout) -> str:
    """Launch attempt `job.attempt` of a claimed job (node 0) and supervise it to its outcome."""
    job_id, number = job.id, job.attempt
    run = RunDir(job_run_dir(settings.resolved_runs_dir, job_id))
    spec_dict = layout.spec_for_ranks(spec.model_dump(mode="json"))
    try:
        latest = _before_launch(engine, settings, job_id, number, run)
    except jobs.FencedOut as exc:
        return str(exc)
    except Exception as exc:  # nothing runs yet: the job fails saying why, never stays `starting`
        log.exception("job %s attempt %s: preparing the launch failed", job_id, number)
        error = f"the worker could not prepare attempt {number}: {type(exc).__name__}: {exc}"
        jobs.finish(engine, job_id, S.failed, detail="worker error", attempt=number, error=error)
        return f"job {job_id}: worker error before launch"
    if latest is not None and not spec.is_script:  # a script finds its own (rankzero.load_checkpoint)
        spec_dict["resume_from"] = str(latest)
    try:
        # Fetching or unpacking a large bundle may outlast the stale threshold: keep the job's heartbeat.
        code = bundles.code_dir(spec, settings, keep_alive=lambda: jobs.touch_live(engine, job_id, number))
        launched = launch(run, spec_dict, job_id, number, layout.topology, cuda, settings, code_dir=code)
    except bundles.BundleUnavailable as exc:
        jobs.finish(engine, job_id, S.failed, detail="code bundle unavailable", attempt=number, error=str(exc))
        return f"job {job_id}: code bundle unavailable"
    except OSError as exc:
        error = f"could not start torchrun: {exc}"
        jobs.finish(engine, job_id, S.failed, detail="launch failed", attempt=number, error=error)
        return f"job {job_id}: launch failed"
    pid = launched.proc.pid
    jobs.mark_running(engine, job_id, pid, detail=f"torchrun pid {pid}, attempt {number}{_where(layout, spec)}",
                      attempt=number)  # fmt: skip
    log.info("job %s attempt %s: torchrun pid %s on %s", job_id, number, pid, cuda or "cpu")
    attempt = Attempt(
        engine, settings, job_id, number, spec, run, launched, layout, int(job.restarts_used), int(job.host_losses)
    )
    return _supervise(attempt)


def _where(layout: Layout, spec: JobSpec) -> str:
    """The timeline's account of how the attempt runs: its other hosts, and an elastic fit."""
    parts = []
    if layout.peers:
        parts.append(f"{layout.topology.nnodes} nodes (with {', '.join(layout.peers)})")
    if layout.topology.nproc != spec.nproc and not spec.is_script:
        parts.append(
            f"running on {layout.topology.nproc} of {spec.nproc} ranks (accumulation ×{layout.accumulation_steps})"
        )
    return "; " + "; ".join(parts) if parts else ""


def _before_launch(engine: Engine, settings: Settings, job_id: int, number: int, run: RunDir) -> Path | None:
    """Never two attempts at once, and nothing an earlier one wrote is lost: stop whatever an earlier
    attempt left running (its ranks checkpoint on SIGTERM), ingest what events.jsonl holds (the durable
    record; its supervisor may have died before writing it), and return the newest intact checkpoint on
    disk to resume from (None for a first attempt, or when there is none)."""
    left = cancel.stop_earlier_attempts(
        run.root,
        settings.cancel_grace_s,
        keep_alive=lambda: jobs.touch_live(engine, job_id, attempt=number),
        attempt=number,
    )
    if left:
        log.warning(
            "job %s attempt %s: stopped %d process(es) an earlier attempt left running", job_id, number, len(left)
        )
    run_record.catch_up(engine, job_id, run, number)
    return run_record.newest_intact_checkpoint(engine, job_id, run) if number > 1 else None


# --- supervising --------------------------------------------------------------------------------


def _supervise(a: Attempt) -> str:
    """Watch the attempt until its ranks exit or must be stopped, then record its outcome.

    A supervisor that was replaced (the row is a later attempt's: it was frozen, or cut off, and
    recovery gave the job to another worker) stops its ranks and writes nothing; any other error
    stops the ranks and records why, so no rank ever trains unsupervised."""
    try:
        watch = _Watch(a)
        ended = _watch_until_ended(watch)
        watch.read_events()  # what the ranks wrote on their way out (final checkpoint, stopped, failed)
        watch.resources.close()
        return _record_outcome(a, watch, ended)
    except jobs.FencedOut:
        return _fenced_out(a)
    except Exception as exc:
        return _supervisor_failed(a, exc)


def _fenced_out(a: Attempt) -> str:
    code = cancel.stop(a.launched.proc, a.launched.mark, a.settings.cancel_grace_s)
    log.warning(
        "job %s: attempt %s was replaced by a later attempt; its ranks stopped (exit %s)", a.job_id, a.number, code
    )
    return f"job {a.job_id}: attempt {a.number} replaced by a later attempt; ranks stopped, nothing written"


def _supervisor_failed(a: Attempt, exc: Exception) -> str:
    """An unexpected error in supervision: stop the ranks (they checkpoint), then fail or restart the job
    saying what went wrong, fenced like every other write."""
    log.exception("job %s attempt %s: supervision failed; stopping its ranks", a.job_id, a.number)
    code = cancel.stop(a.launched.proc, a.launched.mark, a.settings.cancel_grace_s)
    message = f"the worker's supervisor failed ({type(exc).__name__}: {exc}); the ranks were stopped"
    try:
        _check_fence(a)
        return _restart_or_fail(a, errors.Failure(message=message[:2000], exit_code=code))
    except Exception:  # the database too: recovery finds the job by its stale heartbeat
        log.exception("job %s: recording the supervisor's failure failed", a.job_id)
        return f"job {a.job_id}: supervisor failed; ranks stopped, outcome not recorded"


def _check_fence(a: Attempt) -> None:
    """Raise FencedOut when the row is another attempt's (read before writing an outcome)."""
    status, attempt = jobs.status_and_attempt(a.engine, a.job_id)
    if status is not None and attempt != a.number:
        raise jobs.FencedOut(a.job_id, a.number)


class _Watch:
    """The supervision loop's state: events read but not yet written (the database may be down),
    whether this attempt's `started` event was seen (it arms the stall watchdog), and the times of
    the last event, heartbeat and rollup fold. TensorBoard scalars (worker/tensorboard.py) wait in
    `pending_tb`; a script job's log output counts as a sign of life like an event."""

    def __init__(self, a: Attempt) -> None:
        self.a = a
        self.tail = EventTail(a.run.events)
        self.ingestor = Ingestor(a.engine, a.job_id, a.run.root, attempt=a.number)
        self.pending: list[dict[str, Any]] = []
        self.tensorboard = TensorBoardTail(a.run.tensorboard)
        self.pending_tb: list[dict[str, Any]] = []
        self.output_bytes = 0
        self.launched_at = time.time()
        self.started = False
        self.last_beat = self.last_event = self.last_fold = time.monotonic()
        self.heartbeat_mtime = 0.0  # of the ranks' heartbeat file (trainer/train.py `_beat`)
        self._notice_heartbeat()  # an earlier attempt's last beat is not this one's life
        self.started, self.last_event = False, time.monotonic()
        self.last_step: int | None = None
        self.preempt_for: int | None = None  # the job the scheduler stops us for
        self.resources = ResourceWatch(
            a.launched.mark,
            memory_limit_mb=a.spec.memory_limit_mb,
            gpus=list(a.layout.gpus) or None,
            interval_s=a.settings.heartbeat_s,
            settings=a.settings,
        )
        self.over_limit: str | None = None
        self.lost_peer: str | None = None  # another node's host that went silent
        self.last_peer_check = time.monotonic()

    def read_events(self) -> None:
        events = self.tail.read()
        if events:
            self.pending.extend(events)
            self.last_event = time.monotonic()
            self.started = self.started or any(self._is_this_start(e) for e in events)
            steps = [e["step"] for e in events if isinstance(e.get("step"), int)]
            self.last_step = max(steps) if steps else self.last_step
        self._notice_heartbeat()
        self.pending_tb.extend(self.tensorboard.read())
        sample = self.resources.poll(time.monotonic(), self.last_step or 0)
        if sample is not None:
            self.pending_tb.extend(sample.events())  # sys/... series, beside the training ones
            self.over_limit = sample.over_limit
        if self.a.spec.is_script:
            self._notice_output()

    def _notice_output(self) -> None:
        """A script that writes no events is alive while its logs grow (its first output arms the watchdog)."""
        size = script_jobs.output_size(self.a.run, self.a.number)
        if size != self.output_bytes:
            self.output_bytes = size
            self.last_event = time.monotonic()
            self.started = True

    def _notice_heartbeat(self) -> None:
        """Rank 0 touches the heartbeat file every step (at most once a second): life, whatever log_every is."""
        try:
            mtime = self.a.run.heartbeat.stat().st_mtime
        except OSError:
            return
        if mtime > self.heartbeat_mtime:
            self.heartbeat_mtime = mtime
            self.last_event = time.monotonic()
            self.started = True

    def _is_this_start(self, ev: dict[str, Any]) -> bool:
        """This attempt's `started` (an earlier attempt's is older than its launch)."""
        return ev.get("type") == EventType.started and float(ev.get("time", 0)) >= self.launched_at - 1

    def sync(self, now: float) -> JobStatus | None:
        """Write pending events, beat the heart, read the row's status; a database that is down reads
        as `running`: the ranks carry on and the events wait in `pending`."""
        a = self.a
        try:
            self._write_pending(now)
            status, attempt, self.preempt_for = jobs.live_view(a.engine, a.job_id)
            if status is not None and attempt != a.number:
                raise jobs.FencedOut(a.job_id, a.number)
            if now - self.last_beat >= a.settings.heartbeat_s:
                jobs.touch_live(a.engine, a.job_id, attempt=a.number)
                self.last_beat = now
            if a.layout.peers and now - self.last_peer_check >= a.settings.heartbeat_s:
                self.lost_peer = _silent_peer(a)
                self.last_peer_check = now
        except DBAPIError as exc:
            log.warning("job %s: database unavailable, retrying (%s)", a.job_id, type(exc).__name__)
            return S.running
        return status

    def write_pending(self) -> int:
        """Write what was read (events, then TensorBoard scalars); return the new metric points."""
        new = self.ingestor.ingest(self.pending) if self.pending else 0
        self.pending = []
        if self.pending_tb:
            new += self.ingestor.ingest_metrics(self.pending_tb)
            self.pending_tb = []
        return new

    def _write_pending(self, now: float) -> None:
        new = self.write_pending()
        if new and now - self.last_fold > FOLD_EVERY_S:
            _fold_rollups(self.a.engine, self.a.job_id)
            self.last_fold = now

    def stall_limit(self) -> float | None:
        """Seconds without a sign of life (an event, a heartbeat, a script's output) that count as a stall;
        until the first one, settings.startup_timeout_s (a slow start is no stall)."""
        limit = self.a.spec.stall_timeout_s
        if self.started or limit is None:
            return limit
        return self.a.settings.startup_timeout_s

    def stall_note(self) -> str:
        """What the watchdog saw, with the limit that applied: a start-up that never ended, or life that stopped."""
        limit = self.stall_limit() or 0.0
        if not self.started:
            return (
                f"no sign of start-up within {limit:g} s of launch (startup_timeout_s): the ranks never began "
                "training (stuck importing, loading data or in rendezvous)"
            )
        after = f" after step {self.last_step}" if self.last_step is not None else ""
        return f"no sign of life for {limit:g} s{after} (stall_timeout_s; no step, event or output): a rank hung"


def _watch_until_ended(watch: _Watch) -> Ended:
    """Poll until the ranks exit on their own, or stop them when the row, the worker or a stall says so."""
    a = watch.a
    proc, mark = a.launched.proc, a.launched.mark
    while True:
        watch.read_events()
        if proc.poll() is not None:
            return Ended(cancel.wait_gone(proc, mark))
        now = time.monotonic()
        status = watch.sync(now)
        reason = _stop_reason(watch, status, now)
        if reason is not None:
            note = {StopReason.stall: watch.stall_note(), StopReason.memory: watch.over_limit or ""}.get(
                reason, watch.lost_peer or ""
            )
            return Ended(cancel.stop(proc, mark, _grace_s(a.settings, reason)), reason, note)
        time.sleep(a.settings.poll_s)


def _peer_window_s(settings: Settings) -> float:
    """How long another node's host may go without a heartbeat before node 0 gives it up: a few of its
    beats (worker/hosts.py beats every heartbeat_s), much less than the job-level stale threshold."""
    return max(3.0 * settings.heartbeat_s, 3.0)


def _silent_peer(a: Attempt) -> str | None:
    """The first of the other nodes' hosts whose heartbeat stopped (None: all alive)."""
    alive = hosts.alive_names(a.engine, list(a.layout.peers), _peer_window_s(a.settings))
    return next((h for h in a.layout.peers if h not in alive), None)


def _stop_reason(watch: _Watch, status: JobStatus | None, now: float) -> StopReason | None:
    if status == S.cancelling:
        return StopReason.cancel
    if drain.draining(watch.a.settings):
        return StopReason.drain
    if watch.over_limit is not None:
        return StopReason.memory
    if watch.preempt_for is not None and status in (S.starting, S.running):
        return StopReason.preempt
    if watch.lost_peer is not None:
        return StopReason.host_lost
    limit = watch.stall_limit()
    if limit is not None and now - watch.last_event > limit:
        return StopReason.stall
    if status is None or status.is_terminal:
        return StopReason.gone
    return None


def _grace_s(settings: Settings, reason: StopReason) -> float:
    """How long the ranks get to checkpoint after SIGTERM (a hung rank will not: 5 s at most)."""
    return min(settings.cancel_grace_s, 5.0) if reason is StopReason.stall else settings.cancel_grace_s


# --- recording the outcome ----------------------------------------------------------------------


def _record_outcome(a: Attempt, watch: _Watch, ended: Ended) -> str:
    """Write the last events and the outcome, retrying for DB_RETRY_S while the database is unreachable."""
    deadline = time.monotonic() + DB_RETRY_S
    while True:
        try:
            watch.write_pending()
            _fold_rollups(a.engine, a.job_id)
            _check_fence(a)
            return _record(a, watch.ingestor.seen, ended)
        except DBAPIError:
            if time.monotonic() > deadline:
                raise
            log.warning("job %s: database unavailable while recording the outcome; retrying", a.job_id)
            time.sleep(2.0)


def _record(a: Attempt, seen: EventsSeen, ended: Ended) -> str:
    """Write the attempt's outcome to the job row; return the one-line account."""
    if ended.stopped_for is StopReason.cancel:
        return _record_cancelled(a, ended)
    if ended.stopped_for is StopReason.gone:
        return f"job {a.job_id}: row left the live states; ranks stopped"
    if ended.stopped_for is StopReason.drain:
        return _hand_back(a, ended)
    if ended.stopped_for is StopReason.preempt:
        return _step_back(a, ended)
    if ended.stopped_for is StopReason.host_lost:
        return _host_lost(a, f"host {ended.note} went silent", ended.exit_code)
    if ended.stopped_for is None and (ended.exit_code == EXIT_OK or seen.finished):
        hole = run_record.hole_in_record(a.run, expect_finished=not a.spec.is_script)
        if hole is not None:  # never a success with a hole in its record; a restart would not fill it
            _record_failed(
                a, errors.Failure(message=f"the run's record is incomplete: {hole}", exit_code=ended.exit_code)
            )
            return f"job {a.job_id}: failed (incomplete record)"
        return _record_succeeded(a, ended)
    if ended.stopped_for is StopReason.stall:
        return _restart_or_fail(a, _stall_failure(a, ended))
    if ended.stopped_for is StopReason.memory:
        message = f"{ended.note}; its ranks were stopped (the worker enforces the limit: see docs/trainer.md)"
        return _restart_or_fail(a, errors.Failure(message=message, exit_code=ended.exit_code))
    return _restart_or_fail(a, _diagnose_failure(a, seen, ended))


def _record_cancelled(a: Attempt, ended: Ended) -> str:
    detail = f"cancelled; ranks stopped (exit {ended.exit_code})"
    jobs.finish(a.engine, a.job_id, S.cancelled, detail=detail, attempt=a.number, exit_code=ended.exit_code)
    return f"job {a.job_id}: cancelled"


def _hand_back(a: Attempt, ended: Ended) -> str:
    """This worker is shutting down: the ranks checkpointed; another worker resumes the job."""
    detail = "worker shutting down; the job resumes from its latest checkpoint"
    if jobs.requeue(a.engine, a.job_id, detail=detail, attempt=a.number, exit_code=ended.exit_code):
        queue.enqueue_or_defer(a.job_id, a.settings)
    return f"job {a.job_id}: handed back to the queue (worker shutting down)"


def _step_back(a: Attempt, ended: Ended) -> str:
    """Preempted: the ranks checkpointed; the job waits for a place again, nothing lost or counted."""
    for_job = jobs.live_view(a.engine, a.job_id)[2]
    detail = f"preempted to make room for job {for_job} (higher priority); resumes from its latest checkpoint"
    jobs.requeue(a.engine, a.job_id, detail=detail, attempt=a.number, exit_code=ended.exit_code)
    return f"job {a.job_id}: preempted for job {for_job}"


def _host_lost(a: Attempt, what: str, exit_code: int | None) -> str:
    """A node's host was lost (not the job's fault): resume from the latest checkpoint without spending
    max_restarts, unless the job has lost hosts `max_host_losses` times already (it may be what kills them)."""
    most = a.settings.max_host_losses
    if a.host_losses >= most:
        message = (
            f"{what}, and the job had already lost its host {a.host_losses} times (RANKZERO_MAX_HOST_LOSSES "
            f"{most}): not resumed again; check whether the job exhausts its hosts (memory, disk)"
        )
        _record_failed(a, errors.Failure(message=message, exit_code=exit_code))
        return f"job {a.job_id}: failed (too many host losses)"
    detail = f"{what}; every node stopped, resuming from the latest checkpoint ({a.host_losses + 1}/{most} host losses)"
    jobs.requeue(a.engine, a.job_id, detail=detail, attempt=a.number, exit_code=exit_code,
                 host_losses=Job.host_losses + 1)  # fmt: skip
    return f"job {a.job_id}: host lost, resuming"


def _record_succeeded(a: Attempt, ended: Ended) -> str:
    # After `finished` the final checkpoint and every event are on disk; a rank dying in process-group
    # teardown (seen: gloo aborting when its peer exits first) loses nothing, so it is only noted.
    code = ended.exit_code
    if code == EXIT_OK:
        detail = "finished"
    else:
        detail = f"finished (a rank exited with {code} during teardown, after the final checkpoint)"
    if jobs.finish(a.engine, a.job_id, S.succeeded, detail=detail, attempt=a.number, exit_code=code, eta_s=0.0):
        return f"job {a.job_id}: succeeded"
    return f"job {a.job_id}: finished but its row had moved on"


def _stall_failure(a: Attempt, ended: Ended) -> errors.Failure:
    message = f"{ended.note or 'no sign of life (stall_timeout_s)'}; its ranks were stopped"
    return errors.Failure(message=message, exit_code=ended.exit_code)


def _diagnose_failure(a: Attempt, seen: EventsSeen, ended: Ended) -> errors.Failure:
    """torchrun's account of the failure (errors.diagnose), told better where we know more."""
    failure = errors.diagnose(a.run, a.number, a.launched.launcher_log, ended.exit_code)
    trouble = run_record.run_dir_trouble(a.run)
    if trouble is not None:  # the trainer could not even write its `failed` event: say why
        failure.message = f"{trouble}; {failure.message}"
        return failure
    if failure.rank is not None and failure.exit_code is not None and failure.exit_code < 0:
        # Killed by a signal: that rank wrote no error of its own, and rank 0's `failed` event
        # would only echo it (a broken connection), so torchrun's root cause names the rank.
        failure.message = (
            f"killed by {_signal_name(-failure.exit_code)} (out of memory, or killed from outside); "
            "torchrun stopped the other ranks"
        )
    elif seen.failed and seen.failed.get("error"):
        _take_failed_event(failure, seen.failed)
    return failure


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _take_failed_event(failure: errors.Failure, failed: dict[str, Any]) -> None:
    """The trainer's own `failed` event says it best: its error, rank and traceback."""
    failure.message = str(failed["error"])
    if isinstance(failed.get("rank"), int):
        failure.rank = failed["rank"]
    if failed.get("traceback") and not failure.traceback:
        tb = failed["traceback"]
        failure.traceback = tb if isinstance(tb, list) else str(tb).splitlines()


def _restart_or_fail(a: Attempt, failure: errors.Failure) -> str:
    silent = _peer_lost_during(a)
    if silent is not None:  # the other node's host died and took its ranks: not the job's failure
        return _host_lost(a, f"host {silent} went silent ({failure.message})", failure.exit_code)
    if a.restarts_used < a.spec.max_restarts and _requeue_failed(a, failure):
        queue.enqueue_or_defer(a.job_id, a.settings)
        return f"job {a.job_id}: restarting"
    _record_failed(a, failure)
    return f"job {a.job_id}: failed"


def _peer_lost_during(a: Attempt) -> str | None:
    """For a multi-node attempt whose ranks failed: did another node's host die (its ranks' loss broke
    ours)? Its heartbeat tells within a few beats; wait that long for the verdict."""
    if not a.layout.peers:
        return None
    deadline = time.monotonic() + _peer_window_s(a.settings) + a.settings.heartbeat_s
    while True:
        silent = _silent_peer(a)
        if silent is not None or time.monotonic() >= deadline:
            return silent
        time.sleep(min(1.0, a.settings.heartbeat_s))


def _requeue_failed(a: Attempt, failure: errors.Failure) -> bool:
    n, most = a.restarts_used + 1, a.spec.max_restarts
    detail = (
        f"attempt {a.number} failed ({failure.message}); restarting from the latest checkpoint ({n}/{most} restarts)"
    )
    return jobs.requeue(
        a.engine,
        a.job_id,
        detail=detail,
        attempt=a.number,
        failed_rank=failure.rank,
        exit_code=failure.exit_code,
        restarts_used=Job.restarts_used + 1,
    )


def _record_failed(a: Attempt, failure: errors.Failure) -> None:
    error = failure.text()
    latest = _latest_checkpoint(a.engine, a.job_id, a.run)
    if latest is not None:
        where = latest.relative_to(a.run.root.resolve())
        error += f"\nlatest intact checkpoint: {where} (resubmit with resume_from set to it)"
    jobs.finish(
        a.engine,
        a.job_id,
        S.failed,
        detail=failure.message[:500],
        attempt=a.number,
        error=error,
        failed_rank=failure.rank,
        exit_code=failure.exit_code,
    )
