"""The hosts the scheduler places jobs on: their GPUs or slots, what runs where, when each was last seen."""

from __future__ import annotations

from collections import defaultdict

from fastapi import APIRouter
from sqlalchemy import select
from sqlmodel import Session, col

from api.deps import SettingsDep
from api.models import HostJob, HostPublic, SlurmNodePublic
from core import hosts
from core.artifacts import sharing
from core.db import get_read_engine
from core.job_state import HOLDING
from core.placement_record import BadPlacement, read_placement
from core.tables import Job, SlurmNode

router = APIRouter(tags=["hosts"])


def _placed_jobs(session: Session) -> dict[str, list[tuple[HostJob, list[str], int]]]:
    """Per host: the jobs placed there now, with the GPUs and slots each node holds."""
    by_host: dict[str, list[tuple[HostJob, list[str], int]]] = defaultdict(list)
    rows = session.execute(
        select(col(Job.id), col(Job.name), col(Job.placement)).where(
            col(Job.status).in_(list(HOLDING)), col(Job.placement).isnot(None)
        )
    ).all()
    for job_id, name, placed in rows:
        try:
            record = read_placement(placed)
        except BadPlacement:  # damaged by hand: the scheduler places it again; count nothing for it here
            continue
        for node in record.nodes if record else ():
            entry = HostJob(id=job_id, name=name, node_rank=node.node_rank)
            by_host[node.host].append((entry, list(node.gpus), node.slots))
    return by_host


@router.get("/hosts", response_model=list[HostPublic])
def list_hosts(settings: SettingsDep) -> list[HostPublic]:
    """Every registered host, by name: its GPUs (or CPU rank slots), what is free, the jobs on it, and
    whether its workers' heartbeat is fresh (`alive`; a dead host gets nothing new)."""
    engine = get_read_engine(settings.resolved_database_url)
    with Session(engine) as session:
        placed = _placed_jobs(session)
    out = []
    for h in hosts.read_all(engine, settings.resolved_stale_after_s):
        held = placed.get(h.name, [])
        busy_gpus = {g for _, gpus, _ in held for g in gpus}
        cpu_slots_used = sum(slots for _, gpus, slots in held if not gpus)
        out.append(
            HostPublic(
                name=h.name,
                address=h.address,
                pool=h.pool,
                gpus=list(h.gpus),
                cpu_slots=h.cpu_slots,
                free_gpus=[g for g in h.gpus if g not in busy_gpus and g not in h.gpu_faults],
                free_slots=max(0, h.cpu_slots - cpu_slots_used),
                jobs=[job for job, _, _ in held],
                last_seen=h.heartbeat_at,
                alive=h.alive,
                draining=h.draining,
                drain_requested=h.drain_requested,
                drain_note=h.drain_note,
                gpu_faults=dict(h.gpu_faults),
                storage=sharing.known(h.storage),
                storage_note=sharing.DESCRIPTION.get(h.storage, sharing.DESCRIPTION["unknown"]),
            )
        )
    return out


@router.get("/slurm/nodes", response_model=list[SlurmNodePublic])
def list_slurm_nodes(settings: SettingsDep) -> list[SlurmNodePublic]:
    """The partitions and node states of every Slurm pool (docs/slurm.md), as its agent last saw them with
    `sinfo`; empty when no pool is handed to Slurm. Bounded by the cluster's size, one indexed read."""
    engine = get_read_engine(settings.resolved_database_url)
    with Session(engine) as session:
        rows = session.scalars(
            select(SlurmNode).order_by(col(SlurmNode.pool), col(SlurmNode.partition), col(SlurmNode.node)).limit(10_000)
        ).all()
        return [SlurmNodePublic.model_validate(r, from_attributes=True) for r in rows]
