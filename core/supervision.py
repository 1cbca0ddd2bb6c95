"""Whether anything is watching a job (issue 35): a read-side flag, derived, never stored.

A live job's row is kept true by its supervisor: node 0's worker on rankzero's own hosts (its host's heartbeat,
`hosts.heartbeat_at`), or a Slurm pool's `rankzero slurm-agent` (its pool's `pools.seen_at`, stamped every period).
When that supervisor goes silent the row freezes as it was (`running`, the same step) while nothing updates it:
a worker's host is declared lost, and its jobs requeued, only after the stale threshold, and a Slurm pool's jobs
are never taken over. So a job whose supervisor has not been heard from for `silent_after_s` says so, in REST
(`supervisor_silent_s`, `supervisor_silence`), on `rankzero show` and on the job page.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone

from sqlalchemy import func, select
from sqlmodel import Session, col

from core.backends import BackendKind
from core.job_state import LIVE
from core.settings import Settings
from core.tables import Host, Job, JobStatus, Pool

SLURM_PREFIX = "slurm:"  # a Slurm pool's job's worker_host: "slurm:<pool>" (worker/slurm/rows.py claim)
BEATS_MISSED = 3  # periods of the Slurm agent missed before its jobs read as unwatched


@dataclass(frozen=True)
class Supervisor:
    kind: BackendKind  # hosts: a worker host; slurm: a Slurm pool's agent
    name: str  # the host's name, or the pool's

    def words(self) -> str:
        return (
            f"the Slurm agent of pool {self.name}"
            if self.kind is BackendKind.slurm
            else f"the worker on host {self.name}"
        )


@dataclass(frozen=True)
class Silence:
    supervisor: Supervisor
    silent_s: float | None  # None: the supervisor has no heartbeat on record (its row is gone)
    last_seen: datetime | None

    def sentence(self) -> str:
        """ "nothing has watched this job for 3 min: the Slurm agent of pool cluster was last seen at …"."""
        who = self.supervisor.words()
        if self.silent_s is None or self.last_seen is None:
            return f"nothing is watching this job: {who} has no heartbeat on record (it is not registered)"
        at = self.last_seen.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        return f"nothing has watched this job for {duration_words(self.silent_s)}: {who} was last seen at {at}"


def duration_words(seconds: float) -> str:
    if seconds < 90:
        return f"{int(seconds)} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def silent_after_s(settings: Settings) -> float:
    """How long a supervisor may go unheard before its jobs say so: half the stale threshold (a worker's host is
    declared lost at the whole of it, its jobs requeued), and never under BEATS_MISSED of the Slurm agent's
    periods."""
    return max(settings.resolved_stale_after_s / 2, BEATS_MISSED * settings.slurm_poll_s)


def supervisor_of(status: JobStatus, worker_host: str | None, backend_job_id: str | None) -> Supervisor | None:
    """Who keeps the row true now: None for a job nobody supervises (queued for the scheduler, finished). A
    Slurm job the agent requeued waits `queued` with its Slurm job id: the agent still follows it."""
    waiting_in_slurm = status is JobStatus.queued and backend_job_id is not None
    if (status not in LIVE and not waiting_in_slurm) or not worker_host:
        return None
    if worker_host.startswith(SLURM_PREFIX):
        return Supervisor(BackendKind.slurm, worker_host.removeprefix(SLURM_PREFIX))
    first = worker_host.split(",")[0].strip()  # node 0's host: its worker heartbeats the job
    return Supervisor(BackendKind.hosts, first) if first else None


def silence(supervisor: Supervisor | None, last_seen: datetime | None, now: datetime, after_s: float) -> Silence | None:
    """The job's silence, when its supervisor was last heard from more than `after_s` before `now` (or never)."""
    if supervisor is None:
        return None
    if last_seen is None:
        return Silence(supervisor, None, None)
    silent_s = (_aware(now) - _aware(last_seen)).total_seconds()
    return Silence(supervisor, silent_s, _aware(last_seen)) if silent_s > after_s else None


def load(session: Session, jobs: Iterable[Job], settings: Settings) -> dict[int, Silence]:
    """Each of `jobs` whose supervisor is silent (two reads: the hosts' heartbeats and the pools' stamps, by the
    database's clock, which stamped them)."""
    watched = {
        j.id: s for j in jobs if j.id is not None and (s := supervisor_of(j.status, j.worker_host, j.backend_job_id))
    }
    if not watched:
        return {}
    hosts = {s.name for s in watched.values() if s.kind is BackendKind.hosts}
    pools = {s.name for s in watched.values() if s.kind is BackendKind.slurm}
    seen: dict[tuple[BackendKind, str], datetime] = {}
    if hosts:
        for name, at in session.execute(
            select(col(Host.name), col(Host.heartbeat_at)).where(col(Host.name).in_(hosts))
        ):
            seen[(BackendKind.hosts, name)] = at
    if pools:
        for name, at in session.execute(select(col(Pool.name), col(Pool.seen_at)).where(col(Pool.name).in_(pools))):
            seen[(BackendKind.slurm, name)] = at
    postgres = session.get_bind().dialect.name == "postgresql"
    now = session.execute(select(func.now())).scalar_one() if postgres else datetime.now(timezone.utc)
    after = silent_after_s(settings)
    found = {job_id: silence(s, seen.get((s.kind, s.name)), now, after) for job_id, s in watched.items()}
    return {job_id: s for job_id, s in found.items() if s is not None}


def _aware(ts: datetime) -> datetime:
    return ts.replace(tzinfo=timezone.utc) if ts.tzinfo is None else ts  # SQLite hands back naive UTC
