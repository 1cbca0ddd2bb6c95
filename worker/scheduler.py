"""The scheduler: exactly one active in the whole service, placing queued jobs on hosts.

Every worker runs a candidate thread; the one that holds the leader lock (a PostgreSQL session
advisory lock; with SQLite, whose workers share one machine, a flock beside the database file)
runs a pass every `scheduler_poll_s`:

  read hosts (alive = fresh heartbeat) and jobs → core/placement.py `plan` → write each placement
  (a conditional UPDATE of a still-queued, unplaced row) → send each node its message on its host's
  Celery queue → write pending reasons that changed → ask preemption victims to step back.

The database row stays the truth: a placement whose message cannot be sent is taken back, a placed
job whose host dies before starting it is placed again, and a leader that dies releases its lock
(the connection or the process goes), so another worker's candidate takes over within a pass.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from sqlalchemy import select, text
from sqlalchemy.engine import Connection, Engine
from sqlmodel import Session

from core import hosts, jobs, placement, queue, wake
from core.db import get_engine
from core.settings import Settings
from core.tables import Job, JobStatus
from trainer.spec import JobSpec

log = logging.getLogger("rankzero.scheduler")
S = JobStatus
LEADER_LOCK_KEY = 0x72616E73  # 'rans' ('rank' is core/migrate.py's): the advisory lock id candidates compete for
HOLDING = (S.queued, S.starting, S.running, S.cancelling)


class Leadership:
    """Who schedules: PostgreSQL's session advisory lock, held on a connection of our own (it is released
    when that connection or this process dies); elsewhere a flock on a file beside the database."""

    def __init__(self, settings: Settings, waiter: wake.Waiter | None = None) -> None:
        self.settings = settings
        self.url = settings.resolved_database_url
        self.waiter = waiter
        self._conn: Connection | None = None
        self._file: IO[str] | None = None

    @property
    def held(self) -> bool:
        return self._conn is not None or self._file is not None

    def hold(self) -> bool:
        """Keep (or try to take) the lock; False: another candidate is the scheduler."""
        if self.url.startswith("postgresql"):
            return self._hold_advisory()
        return self._hold_file()

    def _hold_advisory(self) -> bool:
        if self._conn is not None:
            try:
                self._conn.execute(text("SELECT 1"))
                return True
            except Exception:  # the connection died: so did the lock
                self.release()
                return False
        conn = get_engine(self.url).connect().execution_options(isolation_level="AUTOCOMMIT")
        try:
            won = bool(conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": LEADER_LOCK_KEY}).scalar())
            if won:  # say who leads, for operators (pg_stat_activity) and tests
                name = f"rankzero-scheduler pid={os.getpid()} host={self.settings.resolved_host_name}"
                conn.execute(text("SELECT set_config('application_name', :n, false)"), {"n": name[:63]})
                log.warning("this worker is now the active scheduler (%s)", name)
            if won and self.waiter is not None:
                self.waiter.listen_on(conn.connection.driver_connection)
        except Exception:
            conn.close()
            raise
        if won:
            self._conn = conn
        else:
            conn.close()
        return won

    def _lock_path(self) -> Path:
        if self.url.startswith("sqlite:///"):
            return Path(self.url.removeprefix("sqlite:///") + ".scheduler.lock")
        return self.settings.resolved_runs_dir / ".scheduler.lock"

    def _hold_file(self) -> bool:
        if self._file is not None:
            return True
        path = self._lock_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(path, "a")  # noqa: SIM115 (the open file is the lock, held while we lead)
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            return False
        self._file = fh
        log.warning("this worker is now the active scheduler (pid %s, lock %s)", os.getpid(), path)
        return True

    def release(self) -> None:
        if self.waiter is not None:
            self.waiter.forget()
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # already broken
                log.debug("closing the leader connection failed", exc_info=True)
            self._conn = None
        if self._file is not None:
            self._file.close()
            self._file = None


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


def _usage(job_id: int, priority: int, spec: JobSpec | None, placed: dict[str, Any]) -> placement.Usage:
    nodes = tuple(
        placement.NodeUse(host=str(n["host"]), gpus=tuple(str(g) for g in n.get("gpus", [])), slots=int(n["slots"]))
        for n in placed.get("nodes", [])
    )
    preemptible = bool(spec and spec.preemptible)
    return placement.Usage(job_id=job_id, priority=priority, preemptible=preemptible, nodes=nodes)


def _read(engine: Engine, settings: Settings) -> _State:
    state = _State(host_rows=hosts.read_all(engine, settings.resolved_stale_after_s))
    alive = {h.name for h in state.host_rows if h.alive}
    with Session(engine) as s:
        rows = s.execute(
            select(
                Job.id, Job.status, Job.queue, Job.priority, Job.created_at, Job.spec, Job.placement,
                Job.placement_id, Job.pending_reason,
            ).where(Job.status.in_(HOLDING))  # type: ignore[attr-defined]
        ).all()  # fmt: skip
    for job_id, status, pool, priority, created, raw, placed, placement_id, reason in rows:
        try:
            spec = JobSpec.model_validate(raw)
        except ValueError as exc:
            spec = None  # stored by an older version, say: it can never be placed
            if status == S.queued and not placed:
                state.invalid[job_id] = str(exc)
        if placed:
            down = [str(n["host"]) for n in placed.get("nodes", []) if str(n["host"]) not in alive]
            if status == S.queued and down:
                state.orphans.append((job_id, placement_id))
                continue
            state.usage.append(_usage(job_id, priority, spec, placed))
        elif status == S.queued and spec is not None:
            state.reasons[job_id] = reason
            state.waiting.append(
                placement.Waiting(
                    job_id=job_id, pool=pool or settings.queue, priority=priority, created_at=_ts(created), spec=spec
                )
            )
    return state


def _views(rows: list[hosts.HostRow]) -> list[placement.HostView]:
    return [
        placement.HostView(
            name=h.name, pool=h.pool, gpus=h.gpus, cpu_slots=h.cpu_slots, storage_id=h.storage_id, draining=h.draining
        )
        for h in rows
        if h.alive
    ]


def _as_json(p: placement.Placement, addresses: dict[str, str]) -> dict[str, Any]:
    return {
        "nodes": [
            {"host": n.host, "node_rank": n.node_rank, "gpus": list(n.gpus), "slots": n.slots,
             "address": addresses.get(n.host, n.host)}
            for n in p.nodes
        ],
        "nproc": p.nproc,
        "accumulation_steps": p.accumulation_steps,
    }  # fmt: skip


def _dispatch(engine: Engine, settings: Settings, p: placement.Placement, state: _State, pools: dict[int, str]) -> bool:
    """Write one placement and send its nodes their messages; take it back if the broker is down."""
    addresses = {h.name: h.address for h in state.host_rows}
    placement_id = uuid.uuid4().hex
    with engine.begin() as conn:
        if not jobs.place(conn, p.job_id, _as_json(p, addresses), placement_id):
            return False  # cancelled or placed meanwhile
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
        jobs.refuse(engine, job_id, f"the stored spec is no longer valid: {why}; resubmit it")
    for job_id, placement_id in state.orphans:
        jobs.unplace(engine, job_id, placement_id, reason="its host went silent before starting it; placing again")
    plan = placement.plan(state.waiting, _views(state.host_rows), state.usage)
    pools = {w.job_id: w.pool for w in state.waiting}
    for p in plan.placements:
        _dispatch(engine, settings, p, state, pools)
    changed = {j: r for j, r in plan.pending.items() if state.reasons.get(j) != r}
    if changed or plan.preempt:
        with engine.begin() as conn:
            for job_id, reason in changed.items():
                jobs.set_pending_reason(conn, job_id, reason[:2000])
            for victim, for_job in plan.preempt.items():
                if jobs.request_preemption(conn, victim, for_job):
                    log.warning("job %s: preempted to make room for job %s", victim, for_job)
    return plan


def start_scheduler_thread(settings: Settings, stop: threading.Event) -> threading.Thread:
    """A candidate: wait for the leader lock, then schedule every `scheduler_poll_s`, or at once when
    woken (core/wake.py: a submit, a requeue, a node's task ending), until `stop`."""
    waiter = wake.Waiter(settings)
    leadership = Leadership(settings, waiter)

    def loop() -> None:
        while not stop.is_set():
            try:
                if leadership.hold():
                    schedule_once(settings)
                    waiter.wait(settings.scheduler_poll_s)
                    continue
            except Exception:  # the database may be restarting: try again, leading or not
                log.exception("scheduler pass failed")
                leadership.release()
            stop.wait(max(1.0, settings.scheduler_poll_s))
        leadership.release()

    thread = threading.Thread(target=loop, name="rankzero-scheduler", daemon=True)
    thread.start()
    return thread


def wait_leader_free(settings: Settings, timeout_s: float) -> bool:
    """For tests and tools: True once this process could take the lock (nobody else schedules)."""
    leadership = Leadership(settings)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if leadership.hold():
                return True
            time.sleep(0.2)
        return False
    finally:
        leadership.release()
