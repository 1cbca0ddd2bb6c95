"""The scheduler: exactly one active in the whole service, placing queued jobs on hosts.

Every worker runs a candidate thread; the one that holds the lease (table `scheduler_lease`,
renewed every pass, taken over once stale: `Leadership`) runs a pass every `scheduler_poll_s`, or at
once when woken (core/wake.py):

  read hosts (alive = fresh heartbeat) and jobs → core/placement.py `plan` → write each placement
  (a conditional UPDATE of a still-queued, unplaced row) → send each node its message on its host's
  Celery queue → write pending reasons that changed → ask preemption victims to step back.

The database row stays the truth: a placement whose message cannot be sent is taken back, a placed
job whose host dies before starting it is placed again, and a leader that dies, freezes or is cut
off stops renewing its lease, so another worker's candidate takes over within `lease_s`.

A leader frozen inside a transaction keeps that transaction's row locks until the server ends its
session (core/db.py, `db_idle_in_transaction_timeout_s`). Meanwhile each write here waits at most
`LOCK_WAIT_S` for a row and, finding it held, leaves that job for a later pass: the rest of the queue
is placed as usual (tests/reliability/test_rel_db_locks.py).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from sqlalchemy import insert, or_, select, update
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlmodel import Session, col

from core import hosts, jobs, placement, pools, queue, retention, team_pass, wake
from core.db import db_now, get_engine, is_lock_timeout, now_sql, wait_for_locks_at_most
from core.job_state import HOLDING
from core.placement_record import BadPlacement, JobPlacement, read_placement
from core.settings import Settings
from core.tables import Job, JobStatus, SchedulerLease
from trainer.spec import JobSpec

log = logging.getLogger("rankzero.scheduler")
S = JobStatus

# How long a scheduler write waits for a row another transaction holds before leaving that job for the
# next pass. Short: a healthy writer holds a job row for milliseconds.
LOCK_WAIT_S = 0.5


class Leadership:
    """Who schedules: a lease in the database (table `scheduler_lease`, one row) that the leader renews
    every pass and another candidate takes once it is `lease_s` stale, by the database's clock. Unlike
    a held lock, a frozen or cut-off leader loses it; when it wakes, its next renewal fails and it
    stops. On PostgreSQL the leader also LISTENs on a connection of its own (core/wake.py)."""

    def __init__(self, settings: Settings, waiter: wake.Waiter | None = None) -> None:
        self.settings = settings
        self.url = settings.resolved_database_url
        self.waiter = waiter
        self.me = f"pid={os.getpid()} host={settings.resolved_host_name} {uuid.uuid4().hex[:8]}"
        self.held = False
        self._listen: Connection | None = None

    @property
    def lease_s(self) -> float:
        """How stale a lease may get before another candidate takes it: a few of the leader's passes."""
        return max(10.0, 4 * self.settings.scheduler_poll_s)

    def hold(self) -> bool:
        """Renew (or try to take) the lease; False: another candidate is the scheduler."""
        engine = get_engine(self.url)
        cutoff = db_now(engine) - timedelta(seconds=self.lease_s)
        mine_or_stale = or_(col(SchedulerLease.holder) == self.me, col(SchedulerLease.renewed_at) < cutoff)
        with engine.begin() as conn:
            wait_for_locks_at_most(conn, 2 * LOCK_WAIT_S)  # a frozen holder of the lease row: try again later
            renewed = conn.execute(
                update(SchedulerLease)
                .where(col(SchedulerLease.id) == 1, mine_or_stale)
                .values(holder=self.me, renewed_at=now_sql(conn))
            ).rowcount
        won = renewed == 1 or self._first(engine)
        if won != self.held:
            self._changed(won)
        return won

    def _first(self, engine: Engine) -> bool:
        """No lease row yet (a new database): the first candidate to insert it leads."""
        try:
            with engine.begin() as conn:
                if conn.execute(select(col(SchedulerLease.id))).first() is not None:
                    return False
                conn.execute(insert(SchedulerLease).values(id=1, holder=self.me, renewed_at=now_sql(conn)))
            return True
        except IntegrityError:
            return False

    def _changed(self, won: bool) -> None:
        self.held = won
        if won:
            log.warning("this worker is now the active scheduler (%s)", self.me)
            if self.waiter is not None and self.url.startswith("postgresql"):
                self._listen = get_engine(self.url).connect().execution_options(isolation_level="AUTOCOMMIT")
                self.waiter.listen_on(self._listen.connection.driver_connection)
        else:
            log.warning("this worker is no longer the active scheduler (its lease was taken)")
            self._drop_listen()

    def _drop_listen(self) -> None:
        if self.waiter is not None:
            self.waiter.forget()
        if self._listen is not None:
            try:
                self._listen.close()
            except Exception:  # already broken
                log.debug("closing the LISTEN connection failed", exc_info=True)
            self._listen = None

    def release(self) -> None:
        """Step down (a graceful stop, or an error): let another candidate take over at its next try."""
        self._drop_listen()
        if not self.held:
            return
        self.held = False
        try:
            with get_engine(self.url).begin() as conn:
                conn.execute(
                    update(SchedulerLease)
                    .where(col(SchedulerLease.id) == 1, col(SchedulerLease.holder) == self.me)
                    .values(renewed_at=datetime(2000, 1, 1, tzinfo=timezone.utc))
                )
        except Exception:  # the database is down: the lease goes stale by itself
            log.debug("could not release the scheduler lease", exc_info=True)


@dataclass
class _State:
    """What one pass read: hosts and jobs, and what the plan needs of them."""

    host_rows: list[hosts.HostRow]
    invalid: dict[int, str] = field(default_factory=dict)  # queued jobs whose stored spec no longer validates
    waiting: list[placement.Waiting] = field(default_factory=list)
    usage: list[placement.Usage] = field(default_factory=list)
    reasons: dict[int, str | None] = field(default_factory=dict)  # pending_reason as stored
    orphans: list[tuple[int, str]] = field(default_factory=list)  # placed-but-queued jobs on a dead host


def _ts(value: datetime) -> float:
    return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).timestamp()


def _usage(
    job_id: int, priority: int, spec: JobSpec | None, placed: JobPlacement, owner: int | None = None
) -> placement.Usage:
    preemptible = bool(spec and spec.preemptible)
    nodes = tuple(n.use() for n in placed.nodes)
    return placement.Usage(job_id=job_id, priority=priority, preemptible=preemptible, nodes=nodes, owner=owner)


class _Specs:
    """The validated specs of the jobs the scheduler holds, kept across passes (issue 29). A job's spec is
    written once, at submit (core/jobs.py `create`), so its validated spec — or why it no longer validates
    — is kept by (database, id, created_at), and a pass reads the spec column only of jobs it has not seen:
    at 10 000 queued jobs, decoding and validating every spec was ~1.3 s of CPU per pass, ten times the
    placement decision. Forgotten once the job holds nothing (not in the pass's read)."""

    CHUNK = 500  # ids per IN (…) read

    def __init__(self) -> None:
        self.known: dict[str, dict[tuple[int, datetime], JobSpec | str]] = {}  # url -> (id, created) -> spec or why

    def of(self, engine: Engine, url: str, jobs: list[tuple[int, datetime]]) -> dict[int, JobSpec | str]:
        known = self.known.get(url, {})
        missing = [job_id for job_id, created in jobs if (job_id, created) not in known]
        raw: dict[int, object] = {}
        with Session(engine) as s:
            for i in range(0, len(missing), self.CHUNK):
                chunk = missing[i : i + self.CHUNK]
                rows = s.execute(select(col(Job.id), col(Job.spec)).where(col(Job.id).in_(chunk))).all()
                raw.update((job_id, spec) for job_id, spec in rows)
        kept: dict[tuple[int, datetime], JobSpec | str] = {}
        for key in jobs:
            value = known.get(key)
            if value is None:
                if key[0] not in raw:  # deleted meanwhile: nothing to place
                    continue
                try:
                    value = JobSpec.model_validate(raw[key[0]])
                except ValueError as exc:  # stored by an older version, say: it can never be placed
                    value = str(exc)
            kept[key] = value
        self.known[url] = kept
        return {job_id: value for (job_id, _), value in kept.items()}


_SPECS = _Specs()


def _read(engine: Engine, settings: Settings) -> _State:
    state = _State(host_rows=hosts.read_all(engine, settings.resolved_stale_after_s))
    # A draining host takes no new message: a job placed there but not started goes elsewhere.
    alive = {h.name for h in state.host_rows if h.alive and not h.draining}
    with Session(engine) as s:
        rows = s.execute(
            select(
                col(Job.id), col(Job.status), col(Job.queue), col(Job.priority), col(Job.created_at),
                col(Job.placement), col(Job.placement_id), col(Job.pending_reason), col(Job.owner_id),
            ).where(col(Job.status).in_(list(HOLDING)))
        ).all()  # fmt: skip
    specs = _SPECS.of(engine, settings.resolved_database_url, [(row[0], row[4]) for row in rows])
    slurm = pools.slurm_names(engine, settings)  # registered by their agents: nothing to set on this worker
    state.invalid = {  # specs that no longer validate: a queued job holding nothing is refused
        row[0]: why for row in rows if isinstance(why := specs.get(row[0]), str) and row[1] == S.queued and not row[5]
    }
    for job_id, status, pool, priority, created, placed, placement_id, reason, owner in rows:
        if job_id not in specs:
            continue  # deleted between the two reads
        spec = value if isinstance(value := specs[job_id], JobSpec) else None
        try:
            record = read_placement(placed)
        except BadPlacement as exc:  # damaged by hand: place a queued job again; a live one holds nothing known
            log.warning("job %s: %s", job_id, exc)
            if status == S.queued:
                state.orphans.append((job_id, placement_id))
            continue
        if record is not None:
            down = [h for h in record.hosts if h not in alive]
            if status == S.queued and down:
                state.orphans.append((job_id, placement_id))
                continue
            state.usage.append(_usage(job_id, priority, spec, record, owner))
        elif (pool or settings.queue) in slurm:  # handed to Slurm by `rankzero slurm-agent`: nothing to place
            if spec is not None and status in (S.running, S.cancelling):  # its quota and fair share count it
                state.usage.append(pools.slurm_usage(job_id, priority, spec, pool or settings.queue, owner))
        elif status == S.queued and spec is not None:
            state.reasons[job_id] = reason
            state.waiting.append(
                placement.Waiting(
                    job_id=job_id,
                    pool=pool or settings.queue,
                    priority=priority,
                    created_at=_ts(created),
                    spec=spec,
                    owner=owner,
                )
            )
    return state


def _views(rows: list[hosts.HostRow]) -> list[placement.HostView]:
    return [h.view() for h in rows if h.alive]


def _write(engine: Engine, job_id: int, what: str, write: Callable[[Connection], bool]) -> bool:
    """`write` in a transaction of its own that waits at most `LOCK_WAIT_S` for a row; False, with a
    warning, when job `job_id`'s row is held by another transaction (a frozen process, say): next pass."""
    try:
        with engine.begin() as conn:
            wait_for_locks_at_most(conn, LOCK_WAIT_S)
            return write(conn)
    except OperationalError as exc:
        if not is_lock_timeout(exc):
            raise
        log.warning("job %s: its row is held by another transaction; %s at a later pass", job_id, what)
        return False


def _dispatch(engine: Engine, settings: Settings, p: placement.Placement, state: _State, pools: dict[int, str]) -> bool:
    """Write one placement and send its nodes their messages; take it back if the broker is down."""
    addresses = {h.name: h.address for h in state.host_rows}
    placement_id = uuid.uuid4().hex
    record = JobPlacement.of(p, addresses).to_json()
    if not _write(engine, p.job_id, "placing it", lambda conn: jobs.place(conn, p.job_id, record, placement_id)):
        return False  # cancelled or placed meanwhile, or its row is held
    pool = pools[p.job_id]
    try:
        for node in p.nodes:
            queue.send_node(p.job_id, node.node_rank, placement_id, hosts.host_queue(pool, node.host), settings)
    except Exception as exc:  # the broker is down: the row says queued and unplaced again
        log.warning("job %s: could not send its placement (%s); it will be placed again", p.job_id, exc)
        jobs.unplace(engine, p.job_id, placement_id, reason="the broker is unreachable; retrying")
        return False
    where = ", ".join(n.host for n in p.nodes)
    log.info("job %s placed on %s (%d rank(s) per node, accumulation %d)", p.job_id, where, p.nproc,
             p.accumulation_steps)  # fmt: skip
    return True


def schedule_once(settings: Settings) -> placement.Plan:
    """One pass: place what fits, say why the rest waits, ask victims to step back. Returns the plan."""
    engine = get_engine(settings.resolved_database_url)
    state = _read(engine, settings)
    for job_id, why in state.invalid.items():
        message = f"the stored spec is no longer valid: {why}; resubmit it"
        _unless_locked(job_id, "refusing it", lambda j=job_id, m=message: jobs.refuse(engine, j, m))
    why = "its host went silent before starting it; placing again"
    for job_id, placement_id in state.orphans:
        _unless_locked(job_id, "placing it again", lambda j=job_id, p=placement_id: jobs.unplace(engine, j, p, why))
    now = time.time()
    plan = placement.plan(state.waiting, _views(state.host_rows), state.usage, team_pass.read(engine, settings, now))
    held = team_pass.held_after(state.usage, plan.placements, state.waiting)
    team_pass.charge(engine, settings, held, now)  # fair-share usage (issue 23)
    pools = {w.job_id: w.pool for w in state.waiting}
    for p in plan.placements:
        _dispatch(engine, settings, p, state, pools)
    changed = {j: r for j, r in plan.pending.items() if state.reasons.get(j) != r}
    for job_id, reason in changed.items():  # one transaction each: a held row holds up only its own job
        _write(engine, job_id, "saying why it waits", lambda c, j=job_id, r=reason: _pending(c, j, r))
    asked = 0
    for victim, for_job in plan.preempt.items():
        if _write(engine, victim, "preempting it", lambda c, v=victim, f=for_job: jobs.request_preemption(c, v, f)):
            log.warning("job %s: preempted to make room for job %s", victim, for_job)
            asked += 1
    if asked:  # the victims' supervisors sleep on the commit touch (worker/wakeups.py): they step back at once
        wake.after_commit(engine)
    return plan


def _pending(conn: Connection, job_id: int, reason: str) -> bool:
    jobs.set_pending_reason(conn, job_id, reason[:2000])
    return True


def _unless_locked(job_id: int, what: str, write: Callable[[], object]) -> None:
    """`write` (its own transaction, the default lock wait); a held row leaves it for a later pass."""
    try:
        write()
    except OperationalError as exc:
        if not is_lock_timeout(exc):
            raise
        log.warning("job %s: its row is held by another transaction; %s at a later pass", job_id, what)


def drive_sweeps(settings: Settings) -> bool:
    """The sweep driver's pass (core/sweeps/driver.py), run by the one active scheduler; never fails the pass.
    True while a sweep is running or paused (or the pass failed): its trials' pruning is judged every pass."""
    try:
        from core.sweeps.driver import drive_once  # imports Optuna on first use, in the leader only

        return drive_once(settings).active > 0
    except Exception:
        log.exception("sweep driver pass failed")
        return True


def next_pass_in(plan: placement.Plan, poll_s: float, lease_s: float, sweeping: bool = False) -> float:
    """How long the leader sleeps unless woken. With nothing queued and no sweep running, a pass can place,
    explain, preempt or prune nothing, and everything that queues a job (a submit, a requeue, a node's end)
    wakes it at once: it sleeps a third of a lease (renewed with room to spare; idle, 0.3 passes a second
    instead of 0.5); else `poll_s` (a sweep's trials are judged for pruning each pass). The fair-share
    charge is judged at the slower pace then."""
    quiet = not (plan.placements or plan.pending or plan.preempt or sweeping)
    return max(poll_s, lease_s / 3) if quiet else poll_s


def start_scheduler_thread(settings: Settings, stop: threading.Event) -> threading.Thread:
    """A candidate: wait for the leader lock, then schedule every `scheduler_poll_s`, or at once when
    woken (core/wake.py: a submit, a requeue, a node's task ending), until `stop`."""
    waiter = wake.Waiter(settings)
    leadership = Leadership(settings, waiter)

    def loop() -> None:
        while not stop.is_set():
            try:
                if leadership.hold():
                    sweeping = drive_sweeps(settings)  # new trials first, so this same pass places them
                    plan = schedule_once(settings)
                    retention.run_due(settings)  # old jobs' points and logs: every retention_interval_s, never raises
                    waiter.wait(next_pass_in(plan, settings.scheduler_poll_s, leadership.lease_s, sweeping))
                    continue
            except Exception:  # the database may be restarting: try again, leading or not
                log.exception("scheduler pass failed")
                leadership.release()
            stop.wait(max(1.0, settings.scheduler_poll_s))
        leadership.release()

    thread = threading.Thread(target=loop, name="rankzero-scheduler", daemon=True)
    thread.start()
    return thread
