"""The hosts table: what each worker registers about its machine, and how the rest reads it.

A host is a machine: its workers (one or several) share its row, keep its heartbeat fresh, and take
the messages the scheduler sends on the host's own Celery queue (`host_queue`). A host whose
heartbeat is older than the stale threshold is dead to the scheduler: nothing is placed on it, and
a multi-node job with a node there is stopped and resumed elsewhere (worker/supervise.py).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from sqlalchemy import select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col

from core.artifacts import sharing, worker_token
from core.db import db_now, get_engine, now_sql
from core.placement import HostView
from core.settings import Settings
from core.tables import Host

STORAGE_ID_FILE = ".storage-id"


def host_queue(pool: str, host: str) -> str:
    """The Celery queue of one host of a pool: the scheduler sends a node's message there."""
    return f"{pool}.host.{host}"


def storage_id(runs_dir: Path) -> str:
    """The id of the runs dir this host sees: written once by the first host, read by the others.

    Hosts that read the same id share the runs dir (a network file system, or one machine), which
    multi-node jobs need: every node reads the spec and the checkpoint, and writes its logs there."""
    path = runs_dir / STORAGE_ID_FILE
    runs_dir.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return path.read_text().strip()[:64] or "unknown"
    with os.fdopen(fd, "w") as fh:
        fh.write(uuid.uuid4().hex)
    return path.read_text().strip()


def register(settings: Settings, gpus: list[str]) -> Host:
    """Insert or refresh this host's row (a second worker on the same machine refreshes the same row)."""
    engine = get_engine(settings.resolved_database_url)
    values = {
        "address": settings.resolved_host_address,
        "pool": settings.queue,
        "gpus": list(gpus),
        "cpu_slots": settings.resolved_cpu_slots,
        "storage_id": storage_id(settings.resolved_runs_dir),
        "storage": storage_of(settings),
        "draining": False,
    }
    name = settings.resolved_host_name
    for _ in range(3):  # two workers of one host registering at once: one inserts, the other updates
        with Session(engine) as s:
            now = now_sql(s)
            if s.get(Host, name) is None:
                s.add(Host(name=name, **values))
            else:
                s.execute(update(Host).where(Host.name == name).values(**values, heartbeat_at=now))  # type: ignore[arg-type]
            try:
                s.commit()
                break
            except IntegrityError:
                s.rollback()
    beat(settings)
    with Session(engine) as s:
        host = s.get_one(Host, name)  # registered just above
        s.expunge(host)
        return host


def storage_of(settings: Settings) -> sharing.Storage:
    """Whether this host's jobs' files reach the API: its runs dir is the API's, or it uploads (issue 22)."""
    return sharing.host_storage(settings.resolved_runs_dir, settings.api_url, worker_token(settings))


def refresh_storage(settings: Settings) -> sharing.Storage:
    """Look again (an API started after this worker leaves its marker later) and record it; the storage."""
    storage = storage_of(settings)
    with get_engine(settings.resolved_database_url).begin() as conn:
        conn.execute(update(Host).where(col(Host.name) == settings.resolved_host_name, col(Host.storage) != storage)
                     .values(storage=storage))  # fmt: skip
    return storage


def beat(settings: Settings, draining: bool = False) -> None:
    """Refresh this host's heartbeat. `draining`: its worker is stopping (its last beat); any other beat clears
    the flag, so a host another of its workers still serves, or one node 0 gave up (`give_up`), is placed on
    again from its next beat."""
    values: dict[str, object] = {"draining": draining}
    with get_engine(settings.resolved_database_url).begin() as conn:
        values["heartbeat_at"] = now_sql(conn)
        conn.execute(update(Host).where(Host.name == settings.resolved_host_name).values(**values))  # type: ignore[arg-type]


@dataclass(frozen=True)
class HostRow:
    """A host as read, with whether it is alive: its heartbeat within the stale threshold (by the DB clock), and
    neither its worker's goodbye nor node 0's giving up (`give_up`) since. `draining` is an operator's drain."""

    name: str
    address: str
    pool: str
    gpus: tuple[str, ...]
    cpu_slots: int
    storage_id: str
    draining: bool
    heartbeat_at: datetime
    alive: bool
    beating: bool = True  # heartbeat within the threshold read with, whatever else (node 0's peer check)
    drain_requested: bool = False  # an operator's drain (`draining` is then true too): survives restarts
    drain_note: str | None = None
    gpu_faults: Mapping[str, str] = field(default_factory=dict)  # GPU → why it is out of placement
    storage: str = "unknown"  # core/artifacts/sharing.py: shared, store (uploads), unknown

    def view(self) -> HostView:
        """The host as the scheduler's pure plan sees it (core/placement.py): the one HostRow → HostView.
        A GPU its health check found failing is not offered (worker/gpu_health.py)."""
        return HostView(
            name=self.name,
            pool=self.pool,
            gpus=tuple(g for g in self.gpus if g not in self.gpu_faults),
            cpu_slots=self.cpu_slots,
            storage_id=sharing.placement_group(self.storage, self.storage_id),  # uploaders need no shared dir
            draining=self.draining,
        )


def _aware(ts: datetime) -> datetime:
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=timezone.utc)  # SQLite hands back naive UTC


def read_all(engine: Engine, stale_after_s: float) -> list[HostRow]:
    """Every registered host, by name."""
    cutoff = db_now(engine) - timedelta(seconds=stale_after_s)
    with Session(engine) as s:
        hosts = s.execute(select(Host).order_by(Host.name)).scalars().all()
        return [
            HostRow(
                name=h.name,
                address=h.address,
                pool=h.pool,
                gpus=tuple(str(g) for g in (h.gpus or [])),
                cpu_slots=int(h.cpu_slots),
                storage_id=h.storage_id,
                draining=bool(h.drain_requested),
                heartbeat_at=_aware(h.heartbeat_at),  # its real last beat: never moved
                alive=_aware(h.heartbeat_at) > cutoff and not h.draining,
                beating=_aware(h.heartbeat_at) > cutoff,
                drain_requested=bool(h.drain_requested),
                drain_note=h.drain_note,
                gpu_faults={str(k): str(v) for k, v in (h.gpu_faults or {}).items()},
                storage=h.storage,
            )
            for h in hosts
        ]


def alive_names(engine: Engine, names: list[str], stale_after_s: float) -> set[str]:
    """Which of `names` are hosts with a fresh heartbeat (a worker's goodbye is not silence: its jobs are
    handed back by its own supervisors)."""
    return {h.name for h in read_all(engine, stale_after_s) if h.beating and h.name in names}


def give_up(engine: Engine, name: str, silent_s: float) -> bool:
    """Node 0 gave up host `name`, silent for `silent_s` (worker/node_zero.py): from now it reads as dead to
    the scheduler and to every node until it heartbeats anew, so the job it lost is not placed back on it
    (one death is one host loss, issue 20). It is flagged as its worker's goodbye would flag it, and only if
    it has not beaten meanwhile (a host that came back is left alone); its heartbeat is left as it was, so
    "last seen" stays true. True: given up now."""
    now = db_now(engine)
    with engine.begin() as conn:
        result = conn.execute(
            update(Host)
            .where(col(Host.name) == name, col(Host.heartbeat_at) < now - timedelta(seconds=silent_s))
            .values(draining=True)
        )
        return result.rowcount == 1


def set_drain(engine: Engine, name: str, drain: bool, note: str | None = None) -> bool:
    """An operator drains (or undrains) host `name`: nothing new is placed there and its running jobs
    checkpoint and move (worker/host_watch.py). Kept across the worker's restarts. False: no such host."""
    values = {"drain_requested": drain, "drain_note": note if drain else None}
    with engine.begin() as conn:
        return conn.execute(update(Host).where(Host.name == name).values(**values)).rowcount == 1  # type: ignore[arg-type]


def set_gpu_faults(settings: Settings, faults: Mapping[str, str]) -> None:
    """This host's failing GPUs and why (worker/gpu_health.py); an empty mapping clears them."""
    with get_engine(settings.resolved_database_url).begin() as conn:
        conn.execute(
            update(Host).where(Host.name == settings.resolved_host_name).values(gpu_faults=dict(faults) or None)  # type: ignore[arg-type]
        )


def drain_requested(settings: Settings) -> bool:
    """Whether an operator drained this host (False when it has no row)."""
    with Session(get_engine(settings.resolved_database_url)) as s:
        host = s.get(Host, settings.resolved_host_name)
        return bool(host and host.drain_requested)
