"""Pools, first-class (issue 35 part 3): which pools exist, which backend runs each, and the submit-time
decisions about them. One API serves every pool at once, with nothing set on it per pool:

- a **hosts pool** exists while some host registered for it (a worker's RANKZERO_QUEUE: `hosts.pool`); the
  API's own RANKZERO_QUEUE always exists, as the default (its first jobs may come before its workers);
- a **Slurm pool** exists once its `rankzero slurm-agent` registered it (table `pools`, each period it asks
  Slurm for the nodes), or where this process has RANKZERO_SLURM_POOL set (an agent, an older API).

A job names its pool in its spec (`pool`, default the API's RANKZERO_QUEUE); the job row's `queue` is that
pool. The scheduler places a hosts pool's jobs only on that pool's hosts (core/placement.py), a worker
claims only its own pool's jobs (`host_may_run`), and an agent only its pool's (worker/slurm/rows.py).

The decisions are pure (`resolve`, `unknown_pool`, `slurm_fit_refusal`, `host_may_run`); `load` reads the
database.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field

from sqlalchemy import distinct, func, select
from sqlalchemy.engine import Engine
from sqlmodel import Session, col

from core.backends import BackendKind
from core.placement_types import NodeUse, Usage
from core.settings import Settings
from core.tables import Host, Pool, SlurmNode
from trainer.spec import JobSpec

LISTED_POOLS = 20  # pools a refusal names (a site has a handful; the nearest name is always said)


@dataclass(frozen=True)
class SlurmPool:
    name: str
    partition: str | None = None  # where its jobs go unless their spec names one (None: Slurm's default, unseen)
    nodes: Mapping[str, int] = field(default_factory=dict)  # partition → its nodes as `sinfo` last showed them


@dataclass(frozen=True)
class Pools:
    """The pools that exist now."""

    default: str  # the API's RANKZERO_QUEUE: a spec without `pool` goes there
    hosts: frozenset[str] = frozenset()  # pools some registered host serves
    slurm: Mapping[str, SlurmPool] = field(default_factory=dict)

    def names(self) -> list[str]:
        return sorted({self.default, *self.hosts, *self.slurm})

    def backend(self, name: str) -> BackendKind:
        """A Slurm pool's jobs are its agent's (a Celery worker registered for it too would change nothing)."""
        return BackendKind.slurm if name in self.slurm else BackendKind.hosts


class UnknownPool(ValueError):
    pass


def unknown_pool(asked: str, pools: Pools) -> str | None:
    """None when `asked` exists, else a refusal naming the pools that do (and the nearest name)."""
    names = pools.names()
    if asked in names:
        return None
    near = difflib.get_close_matches(asked, names, n=1, cutoff=0.6)
    listed = ", ".join(repr(n) for n in names[:LISTED_POOLS]) + (" …" if len(names) > LISTED_POOLS else "")
    hint = f"did you mean {near[0]!r}? " if near else ""
    return (
        f"no pool {asked!r}: the pools are {listed}; {hint}a pool exists once a worker registers for it "
        "(RANKZERO_QUEUE) or a `rankzero slurm-agent` serves it (RANKZERO_SLURM_POOL)"
    )


def resolve(asked: str | None, pools: Pools) -> str:
    """The pool a job with spec `pool` = `asked` runs in; UnknownPool (the refusal) when there is none such."""
    if asked is None:
        return pools.default
    if (why := unknown_pool(asked, pools)) is not None:
        raise UnknownPool(why)
    return asked


def slurm_fit_refusal(spec: JobSpec, pool: SlurmPool) -> str | None:
    """Why a Slurm pool could never run `spec` (more nodes than its partition has, as `sinfo` last showed it),
    or None: Slurm decides the rest, and a partition not seen yet is not judged."""
    partition = spec.slurm.partition if spec.slurm is not None and spec.slurm.partition else pool.partition
    if partition is None and len(pool.nodes) == 1:
        partition = next(iter(pool.nodes))  # one partition: Slurm's default, whatever it is
    size = pool.nodes.get(partition) if partition is not None else None
    if size is None or spec.nnodes <= size:
        return None
    return (
        f"nnodes {spec.nnodes} needs {spec.nnodes} nodes but partition {partition!r} of Slurm pool {pool.name!r} has "
        f"{size}: lower nnodes (nproc per node and accumulation_steps keep the global batch), or name a larger "
        "partition in slurm.partition"
    )


def host_may_run(host_pool: str, job_pool: str | None) -> bool:
    """A host runs only its own pool's jobs (a job row from before pools were recorded: any host's)."""
    return job_pool is None or job_pool == host_pool


def slurm_usage(job_id: int, priority: int, spec: JobSpec, pool: str, owner: int | None) -> Usage:
    """What a running job of a Slurm pool holds, for its owner's quota and fair share (never for placement: its
    "host" is no host of rankzero's): per node, `nproc` GPUs for device 'cuda', else `nproc` CPU slots (device
    'auto' asks Slurm for GPUs only where the agent's RANKZERO_SLURM_GPUS_PER_RANK says so, which the scheduler
    does not know: a rank takes a core at least)."""
    gpus = tuple(str(i) for i in range(spec.nproc)) if spec.device == "cuda" else ()
    node = NodeUse(f"slurm:{pool}", gpus, 0 if gpus else spec.nproc)
    return Usage(job_id, priority, False, (node,) * spec.nnodes, owner)


# --- reading ---------------------------------------------------------------------------------------------


def slurm_names(engine: Engine, settings: Settings) -> set[str]:
    """The Slurm pools (the scheduler leaves their jobs to their agents): one small read."""
    with Session(engine) as s:
        found = s.execute(select(col(Pool.name)).where(col(Pool.backend) == BackendKind.slurm.value)).scalars()
        names = {str(n) for n in found}
    return names | ({settings.slurm_pool} if settings.slurm_pool else set())


def load(engine: Engine, settings: Settings) -> Pools:
    """The pools that exist now (three small reads: hosts' pools, registered Slurm pools, their partitions)."""
    with Session(engine) as s:
        hosts = {str(p) for p in s.execute(select(col(Host.pool)).distinct()).scalars()}
        registered = {str(n): p for n, p in s.execute(select(col(Pool.name), col(Pool.partition))).all()}
        sizes = s.execute(
            select(col(SlurmNode.pool), col(SlurmNode.partition), func.count(distinct(col(SlurmNode.node))))
            .group_by(col(SlurmNode.pool), col(SlurmNode.partition))
        ).all()  # fmt: skip
    if settings.slurm_pool and settings.slurm_pool not in registered:
        registered[settings.slurm_pool] = settings.slurm_partition
    nodes: dict[str, dict[str, int]] = {}
    for pool, partition, count in sizes:
        nodes.setdefault(str(pool), {})[str(partition)] = int(count)
    slurm = {name: SlurmPool(name, partition, nodes.get(name, {})) for name, partition in registered.items()}
    return Pools(default=settings.queue, hosts=frozenset(hosts), slurm=slurm)
