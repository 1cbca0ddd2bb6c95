"""The Slurm agent's reads and writes of job rows. Transitions go through core/jobs.py (`transition`,
`finish`, `requeue`); the few column writes that have no transition (the Slurm job id, Slurm's pending
reason, one heartbeat UPDATE for every live job of the pool) are here, each conditional on the row's attempt.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import bindparam, update
from sqlalchemy import select as columns_of
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from core import jobs
from core.backends import BackendKind, BackendStatus
from core.db import now_sql
from core.job_state import LIVE
from core.tables import Job, JobStatus, Pool, SlurmNode, User, utcnow
from trainer.run_dir import job_run_dir
from worker.slurm.commands import NodeState

S = JobStatus


@dataclass(frozen=True)
class Row:
    """What the agent needs of one live job of its pool."""

    job_id: int
    status: JobStatus
    attempt: int
    backend_job_id: str | None
    first_attempt: int | None
    pending_reason: str | None
    spec: dict
    shown: BackendStatus | None = None  # the partition, nodes and state the row shows now
    owner_id: int | None = None  # whose job (worker/slurm/people.py: whom it is submitted as)


def queued(engine: Engine, pool: str, limit: int = 100) -> list[int]:
    """Queued jobs of the pool not yet handed to Slurm, as the scheduler would order them (priority, then age); a
    requeued job waiting in Slurm's queue keeps its Slurm job id and is followed (`live`), never submitted again."""
    with Session(engine) as s:
        rows = s.exec(
            select(Job.id)
            .where(col(Job.status) == S.queued, col(Job.queue) == pool, col(Job.backend_job_id).is_(None))
            .order_by(col(Job.priority).desc(), col(Job.created_at), col(Job.id))
            .limit(limit)
        ).all()
    return [int(r) for r in rows if r is not None]


def live(engine: Engine, pool: str) -> list[Row]:
    """The pool's live jobs, and its requeued jobs waiting in Slurm's queue (`queued`, with a Slurm job id): the
    columns the agent reads, in one query (no ORM objects: a period's cost)."""
    columns = (col(Job.id), col(Job.status), col(Job.attempt), col(Job.backend_job_id),
               col(Job.backend_first_attempt), col(Job.pending_reason), col(Job.spec), col(Job.backend_partition),
               col(Job.backend_nodes), col(Job.backend_state), col(Job.backend_state_words),
               col(Job.owner_id))  # fmt: skip
    with Session(engine) as s:
        in_slurm = col(Job.status).in_(list(LIVE)) | (
            (col(Job.status) == S.queued) & col(Job.backend_job_id).isnot(None)
        )
        found = s.execute(columns_of(*columns).where(in_slurm, col(Job.queue) == pool)).all()
    return [
        Row(int(i), JobStatus(st), int(a), b, f, r, sp, BackendStatus(pa, no, sa, w) if w is not None else None, o)
        for i, st, a, b, f, r, sp, pa, no, sa, w, o in found
    ]


def claim(engine: Engine, job_id: int, attempt: int | None, runs_dir: Path, pool: str, detail: str) -> Job | None:
    """queued → starting as attempt `attempt` (None: the row's attempt + 1), handed to Slurm."""
    with Session(engine) as s:
        won = jobs.transition(
            s, job_id, S.starting, expect=S.queued, detail=detail,
            attempt=Job.attempt + 1 if attempt is None else attempt, worker_host=f"slurm:{pool}",
            heartbeat_at=now_sql(s), run_dir=str(job_run_dir(runs_dir, job_id)), pid=None, exit_code=None,
            failed_rank=None, pending_reason="handing the job to Slurm",
        )  # fmt: skip
        s.commit()
        if not won:
            return None
        job = s.get(Job, job_id)
        if job is None:
            return None
        s.refresh(job)
        s.expunge(job)
        return job


def user_name(engine: Engine, user_id: int | None) -> str | None:
    """The rankzero user name of `user_id` (None: no owner, or a user since deleted)."""
    if user_id is None:
        return None
    with Session(engine) as s:
        user = s.get(User, user_id)
        return user.name if user is not None else None


def record_submitted(engine: Engine, job_id: int, attempt: int, backend_job_id: str, first_attempt: int) -> bool:
    with engine.begin() as conn:
        result = conn.execute(
            update(Job)
            .where(col(Job.id) == job_id, col(Job.attempt) == attempt, col(Job.status).in_(list(LIVE)))
            .values(backend_job_id=backend_job_id, backend_first_attempt=first_attempt)
        )
        return result.rowcount == 1


def set_reason(engine: Engine, job_id: int, attempt: int, reason: str) -> None:
    with engine.begin() as conn:
        conn.execute(
            update(Job).where(col(Job.id) == job_id, col(Job.attempt) == attempt).values(pending_reason=reason)
        )


def set_shown(engine: Engine, shown: list[tuple[int, int, BackendStatus]]) -> None:
    """The partition, nodes and Slurm state the job page shows, for (job, attempt, status) triples whose status
    changed: one transaction a period (1,000 jobs starting together cost one commit, not 1,000)."""
    if not shown:
        return
    names = list(shown[0][2].columns())
    statement = (
        update(Job)
        .where(col(Job.id) == bindparam("b_job"), col(Job.attempt) == bindparam("b_attempt"))
        .values({name: bindparam(f"b_{name}") for name in names})
    )  # one statement, executed for every row (executemany)
    params = [{"b_job": j, "b_attempt": a, **{f"b_{k}": v for k, v in st.columns().items()}} for j, a, st in shown]
    with engine.begin() as conn:
        conn.execute(statement, params)


def mark_running(engine: Engine, job_id: int, attempt: int, detail: str) -> bool:
    """starting → running (the ranks are Slurm's: no pid on this host)."""
    with Session(engine) as s:
        won = jobs.transition(
            s, job_id, S.running, expect=S.starting, detail=detail, fence=attempt, pid=None,
            heartbeat_at=now_sql(s), pending_reason=None,
        )  # fmt: skip
        s.commit()
        return won


def cancelled_in_slurm(engine: Engine, pool: str, slurm_ids: list[str]) -> list[tuple[int, str]]:
    """(job, Slurm job id) of the pool's cancelled jobs whose Slurm job is among `slurm_ids` (still active)."""
    if not slurm_ids:
        return []
    with Session(engine) as s:
        found = s.execute(
            columns_of(col(Job.id), col(Job.backend_job_id)).where(
                col(Job.queue) == pool, col(Job.status) == S.cancelled, col(Job.backend_job_id).in_(slurm_ids)
            )
        ).all()
    return [(int(i), str(b)) for i, b in found]


def heartbeat(engine: Engine, job_ids: list[int], pool: str | None = None) -> None:
    """One UPDATE for every live job the agent watches: recovery never mistakes them for lost; and, with `pool`,
    the pool's `seen_at`: the agent is alive (a job's page says when nothing has watched it: core/supervision.py)."""
    if pool is not None:
        with engine.begin() as conn:
            conn.execute(update(Pool).where(col(Pool.name) == pool).values(seen_at=now_sql(conn)))
    if not job_ids:
        return
    with engine.begin() as conn:
        conn.execute(
            update(Job)
            .where(col(Job.id).in_(job_ids), col(Job.status).in_(list(LIVE)))
            .values(heartbeat_at=now_sql(conn))
        )


def register_pool(engine: Engine, pool: str, partition: str | None) -> None:
    """The pool exists for every API and scheduler (core/pools.py), its jobs going to `partition` unless their
    spec names another (None: Slurm's default, not seen yet)."""
    with Session(engine) as s:
        row = s.get(Pool, pool) or Pool(name=pool, backend=BackendKind.slurm.value)
        row.backend, row.partition, row.seen_at = BackendKind.slurm.value, partition, utcnow()
        s.add(row)
        s.commit()


def replace_nodes(engine: Engine, pool: str, nodes: list[NodeState]) -> None:
    """The pool's nodes as `sinfo` shows them now, in place of the last snapshot (one transaction)."""
    with Session(engine) as s:
        for old in s.exec(select(SlurmNode).where(col(SlurmNode.pool) == pool)).all():
            s.delete(old)
        s.flush()
        seen = set()
        for n in nodes:
            key = (n.node[:200], n.partition.rstrip("*")[:100])
            if key in seen:
                continue
            seen.add(key)
            reason = None if n.reason in ("", "none") else n.reason[:2000]
            s.add(SlurmNode(pool=pool, node=key[0], partition=key[1], state=n.state[:100], reason=reason,
                            cpus=n.cpus[:40], gres=n.gres[:400]))  # fmt: skip
        s.commit()


def site_cancelling(engine: Engine, job_id: int, attempt: int, words: str) -> bool:
    """A running job the site cancelled (scancel by anyone but rankzero) goes through `cancelling`, as every
    cancel does (core/job_state.py), before the agent finishes it `cancelled`."""
    with Session(engine) as s:
        won = jobs.transition(s, job_id, S.cancelling, expect=S.running, detail=words, fence=attempt)
        s.commit()
    return won


def drop(engine: Engine, job_id: int, attempt: int, words: str) -> bool:
    """A requeued job the site cancelled in Slurm's queue: queued → cancelled (nothing of it runs any more)."""
    with Session(engine) as s:
        won = jobs.transition(s, job_id, S.cancelled, expect=S.queued, detail=words, fence=attempt)
        s.commit()
    return won


def unstart(engine: Engine, job_id: int, attempt: int, words: str) -> bool:
    """A row that says running while Slurm holds the job waiting (no restart seen): back to the queue, with
    Slurm's reason; it starts again when Slurm runs it (worker/slurm/follow.py)."""
    return jobs.requeue(engine, job_id, f"{words}: Slurm holds it waiting, not running", attempt=attempt,
                        pending_reason=words)  # fmt: skip
