"""The placement decision's words (core/placement.py): hosts, what holds them, waiting jobs, the plan, and what
a job needs from a host (GPUs or rank slots). Plain values, no logic beyond the unit arithmetic."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from core import quotas
from trainer.spec import JobSpec

GPU = "gpu"
SLOT = "slot"
LISTED_HOSTS = 5  # hosts named in a pending reason before "… and N more"


@dataclass(frozen=True)
class HostView:
    name: str
    pool: str  # the Celery pool (job.queue) this host serves
    gpus: tuple[str, ...]  # GPU indices, e.g. ("0", "1"); () for a CPU host
    cpu_slots: int  # rank slots for cpu jobs (RANKZERO_CPU_SLOTS, default the core count)
    storage_id: str  # the runs dir it sees, or one group for every host reaching the API's artifact store
    draining: bool = False


@dataclass(frozen=True)
class NodeUse:
    host: str
    gpus: tuple[str, ...] = ()
    slots: int = 0


@dataclass(frozen=True)
class Usage:
    """A job holding capacity now (starting/running/cancelling, or placed but not yet started)."""

    job_id: int
    priority: int
    preemptible: bool
    nodes: tuple[NodeUse, ...]
    owner: int | None = None  # the user who submitted it (issue 23)


@dataclass(frozen=True)
class Waiting:
    job_id: int
    pool: str
    priority: int
    created_at: float  # unix seconds
    spec: JobSpec
    owner: int | None = None  # the user who submitted it (issue 23)


@dataclass(frozen=True)
class Team:
    """What fair share and quotas need (issue 23): per owner, her quota (absent: none) and her decayed
    usage now (core/fair_share.py `usage_at`), and the half-life."""

    quotas: Mapping[int, quotas.Quota] = field(default_factory=dict)
    usage: Mapping[int, float] = field(default_factory=dict)
    half_life_s: float = 3600.0


@dataclass(frozen=True)
class NodePlacement:
    host: str
    node_rank: int
    gpus: tuple[str, ...]  # the GPUs this node's ranks use (CUDA_VISIBLE_DEVICES); () for a slot job
    slots: int  # rank slots taken (0 for a GPU job)


@dataclass(frozen=True)
class Placement:
    job_id: int
    nodes: tuple[NodePlacement, ...]  # node_rank 0 first
    nproc: int  # ranks per node actually launched (elastic: may be < spec.nproc)
    accumulation_steps: int  # raised by elastic fit so nproc × accumulation_steps × nnodes stays the spec's
    requested_nproc: int  # the spec's nproc

    @property
    def elastic(self) -> bool:
        """True when the job starts on fewer ranks than it asked for (accumulation raised)."""
        return self.nproc != self.requested_nproc


@dataclass
class Plan:
    placements: list[Placement] = field(default_factory=list)
    pending: dict[int, str] = field(default_factory=dict)  # job_id -> why it waits
    preempt: dict[int, int] = field(default_factory=dict)  # victim job_id -> the job_id it makes room for
    reserved: dict[str, int] = field(default_factory=dict)  # host -> the blocked job_id holding it (EASY, preemption)


def queue_order(job: Waiting) -> tuple[int, float, int]:
    """The order in which jobs are considered: priority desc, then oldest, then lowest id."""
    return (-job.priority, job.created_at, job.job_id)


# ---------------------------------------------------------------------------------------------------------
# What a job needs from a host


def host_kind(spec: JobSpec, host: HostView) -> str | None:
    """GPU or SLOT: what `spec` takes on `host`; None when that host can never run it."""
    if spec.sync == "dataparallel":
        return GPU if spec.device != "cpu" and len(host.gpus) >= 2 else None
    if spec.device == "cpu":
        return SLOT
    if spec.device == "cuda":
        return GPU if host.gpus else None
    return GPU if host.gpus else SLOT


# A host of each kind, standing in for a pool with no host yet (what a job may take anywhere).
_ANY_HOSTS = (HostView("any-gpu", "", ("0", "1"), 1, ""), HostView("any-cpu", "", (), 1, ""))


def kinds_in_pool(spec: JobSpec, pool_hosts: Iterable[HostView]) -> frozenset[str]:
    """The kinds of unit (GPU, SLOT) `spec` may take on its pool's hosts: the ones its owner's quota counts.
    'auto' takes GPUs only on a host that has some, so on a CPU-only pool only her slot quota counts (issue 37:
    her GPU quota held such a job for ever). A pool with no host that could run it: what it may take anywhere
    (the pool's own refusal is never_fits')."""
    kinds = frozenset(k for h in pool_hosts if (k := host_kind(spec, h)) is not None)
    return kinds or frozenset(k for h in _ANY_HOSTS if (k := host_kind(spec, h)) is not None)


def host_total(host: HostView, kind: str) -> int:
    return len(host.gpus) if kind == GPU else host.cpu_slots


def per_node(spec: JobSpec, host: HostView, ranks: int) -> int:
    """Units (GPUs or slots) a node of `ranks` ranks takes on `host`."""
    return len(host.gpus) if spec.sync == "dataparallel" else ranks


def unit_word(kind: str, n: int) -> str:
    word = "GPU" if kind == GPU else "slot"
    return word if n == 1 else word + "s"


def units_word(kinds: Iterable[str], n: int) -> str:
    kinds = set(kinds)
    if len(kinds) == 1:
        return unit_word(next(iter(kinds)), n)
    return "rank" if n == 1 else "ranks (GPUs or slots)"
