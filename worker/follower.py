"""A node other than node 0 of a multi-node job: launch this host's ranks, and stop them when the job says so.

Node 0's supervisor owns the job row (claim, events, checkpoints, outcome; worker/supervise.py).
A follower waits until node 0 has launched this attempt (the row `running`, with its rendezvous
endpoint), launches torchrun with its node rank against that endpoint, then watches two things: its
own torchrun, and the row. It stops its ranks when the row leaves the live states, moves to another
attempt or placement, is being cancelled or preempted; when its own worker drains, it hands the whole
job back (node 0 then sees the row leave and stops its ranks too). It writes one outcome only, the one
only it can see: its own processes over the job's memory limit (decided as node 0 decides its own). When
its ranks fail otherwise, node 0's ranks fail with them, and node 0 records why.

A database error (a restart, a cut link) never ends the watch: the follower keeps watching its own
torchrun and reads the row again at the next poll. Any other error stops this node's ranks before it
propagates, so no rank is ever left training unwatched (tests/reliability/test_rel_follower.py).
"""

from __future__ import annotations

import dataclasses
import logging
import time

from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

from core import jobs
from core.db import is_outage
from core.job_state import LIVE
from core.placement_record import read_placement
from core.settings import Settings
from core.tables import Job, JobStatus
from trainer.run_dir import RunDir, job_run_dir
from trainer.spec import JobSpec
from worker import artifact_shipping, bundles, drain, environments, gpus, procs
from worker.attempt import Layout, Limits, Seen, StopReason
from worker.decide import Standing, restart_or_fail
from worker.errors import Failure
from worker.launch import Launched, launch
from worker.launch_command import Topology
from worker.outcome import apply
from worker.quota import Quota, QuotaWatch
from worker.resources import ResourceWatch
from worker.resume_fetch import ResumeUnavailable
from worker.stop_reason import stop_reason
from worker.wakeups import Wakeups

log = logging.getLogger("rankzero.worker")
S = JobStatus


def _wait_for_node_zero(engine: Engine, settings: Settings, job_id: int, placement_id: str) -> Job | str:
    """The row once node 0 runs this placement's attempt, or why this node has nothing to do."""
    deadline = time.monotonic() + settings.startup_timeout_s
    while True:
        job = jobs.get_job(engine, job_id)
        if job is None or job.placement_id != placement_id:
            return f"job {job_id}: placement {placement_id[:8]} is no longer the job's"
        if job.status == S.running and job.rendezvous:
            return job
        if job.status not in (S.queued, S.starting):
            return f"job {job_id}: {job.status.value} before this node started"
        if time.monotonic() > deadline:
            return f"job {job_id}: node 0 did not start within startup_timeout_s; this node gives up"
        time.sleep(settings.poll_s)


def run_follower(engine: Engine, settings: Settings, job_id: int, node_rank: int, placement_id: str) -> str:
    """Run node `node_rank` (> 0) of a placed multi-node job; return a one-line account."""
    job = _wait_for_node_zero(engine, settings, job_id, placement_id)
    if isinstance(job, str):
        return job
    placed = read_placement(job)
    node = placed.node(node_rank) if placed is not None else None
    if placed is None or node is None:
        return f"job {job_id}: placement {placement_id[:8]} has no node {node_rank}"
    spec = JobSpec.model_validate(job.spec)
    layout = Layout.of(spec, placed, node_rank, job.rendezvous)
    run = RunDir(job_run_dir(settings.resolved_runs_dir, job_id))
    number = job.attempt
    try:
        lease = gpus.lease_node(settings, node, keep_waiting=lambda: _still_live(engine, job_id, number))
    except gpus.StoppedWaiting:
        return f"job {job_id}: ended while node {node_rank}'s GPUs were being released"
    try:
        procs.stop_earlier_attempts(run.root, settings.cancel_grace_s, attempt=number)
        code = bundles.code_dir(spec, settings)
        try:  # the lock node 0 recorded, built on this host too (issue 28): identical versions on every node
            ready = environments.for_attempt(engine, settings, job_id, number, spec, run, code, node_rank,
                                             keep_alive=lambda: jobs.touch_live(engine, job_id, number))  # fmt: skip
        except environments.EnvironmentFailed as exc:  # the job's requirements, not this host: the job fails
            error = f"node {node_rank} ({settings.resolved_host_name}) could not prepare the environment: {exc}"
            jobs.finish(engine, job_id, S.failed, detail="preparing the environment failed", attempt=number,
                        error=error)  # fmt: skip
            return f"job {job_id}: node {node_rank}: environment failed"
        cuda = gpus.visible_devices(settings, lease)
        spec_dict = layout.spec_for_ranks(spec.model_dump(mode="json"))
        try:  # no shared runs dir: its own spec.json, and the checkpoint it resumes from fetched here
            artifact_shipping.prepare_follower(engine, settings, job_id, number, run, spec_dict)
        except ResumeUnavailable as exc:  # never a silent start from scratch
            error = f"node {node_rank} ({settings.resolved_host_name}): {exc}"
            jobs.finish(engine, job_id, S.failed, detail="checkpoint unavailable", attempt=number, error=error)
            return f"job {job_id}: node {node_rank}: checkpoint unavailable"
        topo = Topology(nproc=layout.nproc, nnodes=layout.nnodes, node_rank=node_rank, endpoint=layout.endpoint)
        launched = launch(run, spec_dict, job_id, number, topo, cuda, settings, code_dir=code,
                          environment=ready.root if ready is not None else None)  # fmt: skip
        log.info("job %s attempt %s: node %s torchrun pid %s", job_id, number, node_rank, launched.proc.pid)
        artifact_shipping.start_for_attempt(settings, job_id, number, run, node_rank)  # its rank logs, if it uploads
        # max_runtime_s holds on every node: node 0 stops the job first; this is the backstop should it not.
        runtime = QuotaWatch(Quota(max_runtime_s=spec.max_runtime_s), run.root, job.started_at, settings.heartbeat_s)
        # memory_limit_mb holds on every node: each samples its own processes (node 0 cannot see ours).
        memory = ResourceWatch(launched.mark, memory_limit_mb=spec.memory_limit_mb, gpus=None,
                               interval_s=settings.heartbeat_s, settings=settings)  # fmt: skip
        try:
            return _follow(engine, settings, job_id, number, node_rank, launched, runtime, memory)
        except BaseException:  # never leave ranks unwatched: stop them (they checkpoint), then report
            log.exception("job %s: node %s's watch failed; stopping its ranks", job_id, node_rank)
            procs.stop(launched.proc, launched.mark, settings.cancel_grace_s)
            raise
        finally:
            memory.close()
            artifact_shipping.finish(job_id, number, node_rank)
    finally:
        if lease is not None:
            lease.release()


def _still_live(engine: Engine, job_id: int, attempt: int) -> bool:
    status, current, _ = jobs.live_view(engine, job_id)
    return status in LIVE and current == attempt


def _look(engine: Engine, settings: Settings, job_id: int) -> Seen:
    """What a follower watches: the row (status, attempt, preemption) and its own worker's drain."""
    status, attempt, preempt_for = jobs.live_view(engine, job_id)
    drained = drain.draining(settings) or drain.host_drained(settings)  # its worker stops, or its host is drained
    return Seen(status=status, attempt=attempt, preempt_for=preempt_for, draining=drained)


def _follow(  # noqa: PLR0913 (the watches of its own beyond the row: the runtime quota, its memory)
    engine: Engine,
    settings: Settings,
    job_id: int,
    number: int,
    node_rank: int,
    launched: Launched,
    runtime: QuotaWatch | None = None,
    memory: ResourceWatch | None = None,
) -> str:
    """Watch this node's torchrun until it exits, or stop it when the row says so, or when this node's
    processes break the memory limit (worker/stop_reason.py; no stall or peer watch here: node 0 keeps those)."""
    wakeups = Wakeups(launched.proc, engine, fallback_s=settings.poll_s)  # its ranks' exit, a cancel, deadlines
    try:
        return _watch(engine, settings, job_id, number, node_rank, launched, wakeups, runtime, memory)
    finally:
        wakeups.close()


def _watch(  # noqa: PLR0913 (as _follow, with its wake-ups)
    engine: Engine,
    settings: Settings,
    job_id: int,
    number: int,
    node_rank: int,
    launched: Launched,
    wakeups: Wakeups,
    runtime: QuotaWatch | None,
    memory: ResourceWatch | None,
) -> str:
    proc, mark = launched.proc, launched.mark
    limits = Limits(attempt=number)
    cadence = wakeups.cadence
    db_down = False
    row_due = 0.0  # monotonic; the row is read at once when a commit wakes the watch
    while proc.poll() is None:
        now = time.monotonic()
        if now < row_due and (memory is None or now < memory.due()):
            woken = wakeups.wait(min(row_due, memory.due() if memory is not None else row_due), files_from=now)
            row_due = 0.0 if woken.row else row_due
            continue
        try:
            seen = _look(engine, settings, job_id)
        except DBAPIError as exc:  # restarting or cut off: node 0 decides; our ranks go on, watched
            if not is_outage(exc):  # bad data or a bug: the watch fails (its ranks are stopped), never loops
                raise
            if not db_down:
                log.warning("job %s: node %s cannot read the job (%s); watching its ranks, retrying", job_id,
                            node_rank, type(exc).__name__)  # fmt: skip
            db_down = True
            row_due = now + settings.poll_s
            continue
        row_due = now + cadence.row_s
        if db_down:
            log.warning("job %s: node %s reads the job again", job_id, node_rank)
            db_down = False
        seen = _with_limits(seen, settings, runtime, memory)
        reason = stop_reason(seen, limits)
        if reason is not None:
            _before_stop(engine, settings, job_id, number, node_rank, reason, seen)
            code = procs.stop(proc, mark, settings.cancel_grace_s)
            left = "queued" if reason is StopReason.drain else seen.status.value if seen.status else "gone"
            return f"job {job_id}: node {node_rank} stopped ({left}; exit {code})"
    code = procs.wait_gone(proc, mark)
    return f"job {job_id}: node {node_rank} ranks exited ({code})"


def _before_stop(  # noqa: PLR0913 (the job, this node, and why)
    engine: Engine, settings: Settings, job_id: int, number: int, node_rank: int, reason: StopReason, seen: Seen
) -> None:
    """What this node writes before it stops its ranks: the decision over its own memory (node 0 then sees the
    row leave), or the job handed back when its worker drains. Never raises over the database: the ranks
    stop all the same, and node 0 sees them fail and decides."""
    try:
        if reason is StopReason.memory:
            _over_memory(engine, settings, job_id, number, node_rank, seen.over_limit or "")
        elif reason is StopReason.drain:
            detail = f"node {node_rank}: {drain.why(settings)}; the job resumes from its latest checkpoint"
            jobs.requeue(engine, job_id, detail=detail, attempt=number)
    except DBAPIError:
        log.warning("job %s: node %s could not write why it stops (%s)", job_id, node_rank, reason.value, exc_info=True)


def _with_limits(seen: Seen, settings: Settings, runtime: QuotaWatch | None, memory: ResourceWatch | None) -> Seen:
    """`seen` with the limits this node checks itself: max_runtime_s (a backstop) and its own memory."""
    if runtime is not None:  # a margin: node 0, which writes the outcome, stops the job first
        margin = settings.cancel_grace_s + 30.0
        seen = dataclasses.replace(seen, broke_limit=runtime.check(time.monotonic(), runtime_margin_s=margin))
    sample = memory.poll(time.monotonic(), 0) if memory is not None else None
    if sample is not None and sample.over_limit:
        seen = dataclasses.replace(seen, over_limit=sample.over_limit)
    return seen


def _over_memory(engine: Engine, settings: Settings, job_id: int, number: int, node_rank: int, over: str) -> None:
    """This node's processes broke the job's memory limit: the same decision node 0 makes for its own
    (worker/decide.py: a restart while max_restarts allows, else the job fails), written by this node because
    only it saw the numbers. Written before its ranks stop, so node 0 finds the row gone and writes nothing."""
    job = jobs.get_job(engine, job_id)
    if job is None or job.attempt != number:
        return
    spec = JobSpec.model_validate(job.spec)
    message = (
        f"node {node_rank} (host {settings.resolved_host_name}): {over}; its ranks were stopped (the worker "
        "enforces the limit on every node: see docs/trainer.md)"
    )
    standing = Standing(number, int(job.restarts_used), spec.max_restarts, int(job.host_losses),
                        settings.max_host_losses, job_id=job_id)  # fmt: skip
    outcome = restart_or_fail(standing, Failure(message=message), None, None)
    log.warning("job %s: %s", job_id, apply(engine, job_id, number, outcome))
