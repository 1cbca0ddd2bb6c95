"""The scheduler's placement decision: a pure function from (queue, hosts, usage) to a plan (issue 10).

No database, no I/O, no torch. The scheduler loop reads the queued jobs, the hosts and what holds
capacity now, calls `plan()` once per pass, and writes what it says: placements to launch, a pending
reason per waiting job, and the preemptible jobs to stop (checkpoint, requeue) for a higher one.
`never_fits()` is the submit-time refusal: compared with host totals, not with what is free.

Rules (see tests/scheduler/test_placement.py, one test per rule):

* Capacity. On a host with GPUs a job of device 'cuda' or 'auto' takes one GPU per rank (sync
  'dataparallel': every GPU of the host, which needs ≥ 2); a 'cpu' job, or an 'auto' job on a host
  without GPUs, takes one *slot* per rank out of the host's `cpu_slots`. Free = total − usage.
  Only hosts of the job's pool, never draining ones.
* Gang. `nnodes` N: N distinct hosts, each with the per-node ranks free now, all seeing the same runs
  dir (`storage_id`) and of one kind (all GPU or all slots) — or nothing. Best fit: the host(s) with
  the least free capacity that still fits (GPU hosts before CPU hosts for 'auto'), ties by name;
  node ranks follow host names.
* Order. priority desc, created_at asc, job_id asc. EASY backfill: the first job of a pool that cannot
  start reserves the host(s) it would take first (most free among those big enough); later jobs never
  use a reserved host. One such reservation per pool, so the queue never freezes.
* Elastic fit. A single-node job with `min_nproc` starts at full size if that fits anywhere, else on
  the largest w in `spec.elastic_sizes()` that fits, with accumulation_steps = nproc·acc // w.
* Team (issue 23; only when `plan` gets a `Team`). Quota: a job that would take its owner past her
  GPU or CPU-slot quota waits with the quota as its reason, reserving nothing and preempting no one.
  Fair share: among jobs of equal priority the owner with the smallest share (core/fair_share.py:
  decayed recent usage + units held now × mean life, updated as this pass places her jobs) goes
  first, then oldest; so two users' queues interleave. Priorities still come first, and EASY backfill
  and preemption apply to jobs in that order.
* Preemption. A job that cannot start now may stop running preemptible jobs of strictly lower
  priority on its pool's hosts: on one host (per needed host for multi-node), lowest priority first,
  then youngest (highest id), then redundant victims dropped; among hosts the one whose victims have
  the lowest top priority, then fewest victims. The job reserves those hosts and waits.

Speed (issue 29): within a pass a failure is monotone (free capacity only shrinks, reservations and claimed
victims only grow), so jobs are grouped in classes (pool, device, sync, nnodes): once r ranks per node did
not fit, no later job of the class needing ≥ r is tried against the hosts again, and likewise for
preemption at a priority. Nothing scans a pool per job: each set of hosts a class uses keeps its free
capacity sorted (`_Index`: best fit is a binary search, a placement moves one host in a few lists), jobs
of one demand share a `_Shape` whose reason is said again only when the pool's capacity or reservations
change, and preemption keeps a heap per (class, size, priority) that re-costs only the hosts changed since
(`_VictimQuery`). A pass costs about O(jobs + (placements + preemptions) × log hosts) plus a scan per
class set up and per gang preemption. core/placement_reference.py is the full pass this one must decide
as (tests/scheduler/test_placement_equivalence.py); bench/scheduler.py times both.

Stable across passes: the same inputs give the same plan. Jobs being preempted should be passed in `usage`
as they are (preemptible, until they exit): the next pass then names the same victims again instead of
picking more.
"""

from __future__ import annotations

import bisect
import heapq
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter

from core import fair_share, quotas
from trainer.spec import JobSpec

GPU = "gpu"
SLOT = "slot"
_LISTED_HOSTS = 5  # hosts named in a pending reason before "… and N more"


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


def _total(host: HostView, kind: str) -> int:
    return len(host.gpus) if kind == GPU else host.cpu_slots


def _per_node(spec: JobSpec, host: HostView, ranks: int) -> int:
    """Units (GPUs or slots) a node of `ranks` ranks takes on `host`."""
    return len(host.gpus) if spec.sync == "dataparallel" else ranks


def _unit(kind: str, n: int) -> str:
    word = "GPU" if kind == GPU else "slot"
    return word if n == 1 else word + "s"


def _units(kinds: Iterable[str], n: int) -> str:
    kinds = set(kinds)
    if len(kinds) == 1:
        return _unit(next(iter(kinds)), n)
    return "rank" if n == 1 else "ranks (GPUs or slots)"


# ---------------------------------------------------------------------------------------------------------
# A host's state during one pass


class _Host:
    __slots__ = ("name", "reserved_by", "victims", "view", "free_gpus", "free_slots", "indexes", "stamp", "changes")

    def __init__(self, view: HostView, changes: list[str]) -> None:
        self.view = view
        self.name = view.name
        self.free_gpus: list[str] = list(view.gpus)
        self.free_slots = view.cpu_slots
        self.reserved_by: Waiting | None = None
        self.victims: list[_Victim] = []  # preemptible jobs here, lowest priority then youngest first
        self.indexes: list[_Index] = []  # the free-capacity indexes that list this host
        self.stamp = 0  # bumped whenever what preemption would find here changes (free, reserved, victims)
        self.changes = changes  # the pass's log of changed hosts, shared by all

    def hold(self, node: NodeUse) -> None:
        if node.gpus:
            held = set(node.gpus)
            self.free_gpus = [g for g in self.free_gpus if g not in held]
        self.free_slots -= node.slots

    def free(self, kind: str) -> int:
        if kind == GPU:
            return len(self.free_gpus)
        return self.free_slots if self.free_slots > 0 else 0

    def take(self, kind: str, n: int) -> tuple[tuple[str, ...], int]:
        if kind == GPU:
            before = len(self.free_gpus)
            taken, self.free_gpus = tuple(self.free_gpus[:n]), self.free_gpus[n:]
            result = taken, 0
        else:
            before = self.free_slots if self.free_slots > 0 else 0
            self.free_slots -= n
            result = (), n
        for index in self.indexes:
            if index.kind == kind:
                index.moved(self, before)
        self.touch()
        return result

    def touch(self) -> None:
        self.stamp += 1
        self.changes.append(self.name)


@dataclass(frozen=True)
class _Victim:
    job_id: int
    priority: int
    gpus: int  # GPUs it holds on this host
    slots: int

    def frees(self, kind: str) -> int:
        return self.gpus if kind == GPU else self.slots


class _Option:
    """A host a job shape can run on: its kind and the units its full size needs there."""

    __slots__ = ("host", "kind", "total", "rank")

    def __init__(self, host: _Host, kind: str, total: int) -> None:
        self.host = host
        self.kind = kind
        self.total = total
        self.rank = 0 if kind == GPU else 1  # GPU hosts first for 'auto'


_Entry = tuple[int, str]  # (free units, host name)


def _insert(entries: list[_Entry], entry: _Entry) -> None:
    bisect.insort(entries, entry)


def _remove(entries: list[_Entry], entry: _Entry) -> None:
    del entries[bisect.bisect_left(entries, entry)]


class _Index:
    """The free capacity of one kind on a set of a pool's hosts, kept sorted while the pass places jobs, so
    that best fit is a binary search instead of a scan of the pool (issue 29). Classes whose hosts and kind
    are the same share one. `open`: unreserved hosts by (free, name), for 'dataparallel' (`whole`) only
    those with every GPU free; `everyone`: every host by (-free, name), the order of the reasons' "most
    free"; `reserved`: reserved hosts by (free, name), whose free no longer changes in the pass (nothing is
    placed on them); and per runs dir the unreserved and all hosts by (free, name), for gangs."""

    def __init__(self, kind: str, hosts: list[_Host], whole: bool) -> None:
        self.kind = kind
        self.rank = 0 if kind == GPU else 1
        self.whole = whole
        self.total = {h.name: _total(h.view, kind) for h in hosts}
        self.storage = {h.name: h.view.storage_id for h in hosts}
        self.everyone = sorted((-h.free(kind), h.name) for h in hosts)
        self.open: list[_Entry] = []
        self.reserved: list[_Entry] = []
        self.open_by_dir: dict[str, list[_Entry]] = {}
        self.all_by_dir: dict[str, list[_Entry]] = {}
        self.names_by_dir: dict[str, list[str]] = {}
        for h in hosts:
            self.names_by_dir.setdefault(h.view.storage_id, []).append(h.name)
            entry = (h.free(kind), h.name)
            self.all_by_dir.setdefault(h.view.storage_id, []).append(entry)
            if h.reserved_by is not None:
                self.reserved.append(entry)
            else:
                self.open_by_dir.setdefault(h.view.storage_id, []).append(entry)
                if self._is_open(entry):
                    self.open.append(entry)
            h.indexes.append(self)
        for entries in (self.open, self.reserved, *self.open_by_dir.values(), *self.all_by_dir.values()):
            entries.sort()

    def _is_open(self, entry: _Entry) -> bool:
        return not self.whole or entry[0] == self.total[entry[1]]

    def moved(self, host: _Host, before: int) -> None:
        """`host` (unreserved: only those take jobs) had `before` units free and now has what it has."""
        after, name = host.free(self.kind), host.name
        if after == before:
            return
        old, new = (before, name), (after, name)
        bisect_left, insort = bisect.bisect_left, bisect.insort  # (inline: a placement's hot path)
        everyone = self.everyone
        del everyone[bisect_left(everyone, (-before, name))]
        insort(everyone, (-after, name))
        storage = self.storage[name]
        for entries in (self.all_by_dir[storage], self.open_by_dir[storage]):
            del entries[bisect_left(entries, old)]
            insort(entries, new)
        total = self.total[name] if self.whole else None
        if total is None or before == total:
            del self.open[bisect_left(self.open, old)]
        if total is None or after == total:
            insort(self.open, new)

    def reserve(self, host: _Host) -> None:
        entry = (host.free(self.kind), host.name)
        if self._is_open(entry):
            _remove(self.open, entry)
        _remove(self.open_by_dir[self.storage[host.name]], entry)
        _insert(self.reserved, entry)

    def first_fit(self, need: int, entries: list[_Entry]) -> str | None:
        """The host of `entries` with the least free that holds `need` per node (whole: every GPU), by name."""
        if self.whole:
            return next((name for free, name in entries if free >= self.total[name]), None)
        i = bisect.bisect_left(entries, (need,))
        return entries[i][1] if i < len(entries) else None

    def at_least(self, need: int) -> int:
        """How many hosts have `need` or more free."""
        return bisect.bisect_left(self.everyone, (1 - need,))


@dataclass
class _Class:
    """Jobs alike but for their size: (pool, device, sync, nnodes). They run on the same hosts, and within a
    pass a failure is monotone in size (free capacity only shrinks; reservations and claimed victims only
    grow), so what failed for r ranks per node fails for every later job of the class needing ≥ r."""

    options: list[_Option]  # hosts of the pool that could ever run it, by name
    parts: list[_Index]  # their free capacity, GPU hosts before CPU hosts
    max_total: int
    draining: list[HostView]  # hosts of the pool that could run it but are draining
    kinds: frozenset[str] = frozenset()  # GPU and/or SLOT
    by_name: dict[str, _Option] = field(default_factory=dict)
    fit_failed: int | None = None  # the fewest ranks per node that did not fit
    preempt_failed: dict[int, int] = field(default_factory=dict)  # ranks -> highest priority preemption failed
    preempt_failures: list[int] = field(default_factory=list)  # each failure's ranks, in order (a version)
    most_free: tuple[object, str] = ((), "")  # (the first hosts of each part, "host-a 2 of 4, …") last said
    others: dict[str, _Class] = field(default_factory=dict)  # the same hosts without one kind (quotas)

    def __post_init__(self) -> None:
        if not self.by_name:
            self.by_name = {o.host.name: o for o in self.options}

    def sized(self, nnodes: int) -> _Class:
        """A class of the same hosts with state of its own (one per nnodes)."""
        return _Class(self.options, self.parts, self.max_total, self.draining, self.kinds, self.by_name)

    def most_free_text(self) -> str:
        """The class's "most free" list, formatted again only when its first hosts or their free changed
        (best fit mostly fills the fullest hosts, so a placement rarely moves the most free ones)."""
        firsts = tuple(tuple(part.everyone[:_LISTED_HOSTS]) for part in self.parts)
        if firsts != self.most_free[0]:
            self.most_free = (firsts, _most_free(self.parts, len(self.kinds) > 1))
        return self.most_free[1]

    def gang_could_fit(self, nproc: int, nnodes: int) -> bool:
        """Some runs dir and kind has `nnodes` hosts of `nproc` or more in all: never_fits would say None."""
        for part in self.parts:
            for names in part.names_by_dir.values():
                if sum(1 for name in names if part.total[name] >= nproc) >= nnodes:
                    return True
        return False

    def without(self, kind: str) -> _Class | None:
        """This class on its hosts of the other kind only ('auto' past a quota of `kind`), or None."""
        if kind not in self.others:
            options = [o for o in self.options if o.kind != kind]
            parts = [p for p in self.parts if p.kind != kind]
            most = max((o.total for o in options), default=0)
            self.others[kind] = _Class(options, parts, most, [], frozenset(o.kind for o in options))
        other = self.others[kind]
        return other if other.options else None


# All that placement reads of a queued job but its id, priority, age and owner (one C call per job).
_demand = attrgetter(
    "pool", "spec.device", "spec.sync", "spec.nnodes", "spec.nproc", "spec.min_nproc", "spec.accumulation_steps"
)


@dataclass
class _Shape:
    """What every job of one demand needs: (pool, device, sync, nnodes, nproc, min_nproc, accumulation_steps)
    — all that placement reads of a spec but its priority and owner. Made once per pass and demand."""

    pool: str
    spec: JobSpec  # the first such job's: the others differ only where placement does not look
    sizes: list[int]  # rank counts per node, largest first
    cls: _Class
    never: str | None = None  # why no host of the pool could ever run it (the same for the whole demand)
    reason_at: int = -1  # the pool's version `reason` was said at
    reason: str = ""
    blocked_at: int = -1  # the pass's reservation count `blocked` was said at (single node)
    blocked: str | None = None
    need: tuple[str, str] | None = None  # a single-node reason's words before and after the most free hosts

    smallest: int = field(init=False)  # the fewest ranks per node it may start on
    hopeless_at: int = -1  # the class's preemption failures `hopeless_below` was read at
    hopeless_below: int | None = None  # preemption failed for jobs of this size at this priority or more

    def __post_init__(self) -> None:
        self.smallest = self.sizes[-1]

    @property
    def options(self) -> list[_Option]:
        return self.cls.options


# ---------------------------------------------------------------------------------------------------------
# Fitting


def _best_single(shape: _Shape, ranks: int) -> _Option | None:
    """Best fit: the unreserved host with the least free capacity that still holds `ranks` ranks (GPU hosts
    first), ties by name."""
    for part in shape.cls.parts:
        name = part.first_fit(ranks, part.open)
        if name is not None:
            return shape.cls.by_name[name]
    return None


def _groups(options: Iterable[_Option]) -> dict[tuple[str, str], list[_Option]]:
    groups: dict[tuple[str, str], list[_Option]] = {}
    for opt in options:
        groups.setdefault((opt.host.view.storage_id, opt.kind), []).append(opt)
    return groups


def _best_gang(shape: _Shape, ignore_reserved: bool = False) -> list[_Option] | None:
    """N hosts of one runs dir and kind, each with nproc free: the tightest such set, else None."""
    need, count = shape.spec.nproc, shape.spec.nnodes
    best: list[_Entry] | None = None
    best_key: tuple[int, int, str] | None = None
    for part in shape.cls.parts:
        for storage, entries in (part.all_by_dir if ignore_reserved else part.open_by_dir).items():
            i = bisect.bisect_left(entries, (need,))
            if len(entries) - i < count:
                continue
            chosen = entries[i : i + count]
            key = (part.rank, sum(free for free, _ in chosen), storage)
            if best_key is None or key < best_key:
                best, best_key = chosen, key
    return [shape.cls.by_name[name] for _, name in best] if best else None


def _launch(job: Waiting, chosen: list[_Option], ranks: int) -> Placement:
    spec = job.spec
    whole = spec.sync == "dataparallel"  # every GPU of the host (`_per_node`)
    nodes = []
    for rank, opt in enumerate(chosen if len(chosen) == 1 else sorted(chosen, key=lambda o: o.host.name)):
        gpus, slots = opt.host.take(opt.kind, len(opt.host.view.gpus) if whole else ranks)
        nodes.append(NodePlacement(opt.host.name, rank, gpus, slots))
    accumulation = spec.nproc * spec.accumulation_steps // ranks
    return Placement(job.job_id, tuple(nodes), ranks, accumulation, spec.nproc)


def _fit(shape: _Shape) -> tuple[list[_Option], int] | None:
    """The hosts and ranks per node the shape starts on now, or None."""
    if shape.spec.nnodes > 1:
        gang = _best_gang(shape)
        return (gang, shape.spec.nproc) if gang else None
    for ranks in shape.sizes:  # full size first; smaller (elastic) only when it fits nowhere
        opt = _best_single(shape, ranks)
        if opt is not None:
            return [opt], ranks
    return None


# ---------------------------------------------------------------------------------------------------------
# Reservations (EASY backfill)


def _reservation(shape: _Shape) -> list[_Host]:
    """The host(s) a blocked job would take first: most free among those big enough, not yet reserved.
    Once per pool and pass, so a scan."""
    free_opts = [o for o in shape.options if o.host.reserved_by is None]
    if shape.spec.nnodes == 1:
        target = max((r for r in shape.sizes if any(o.total >= r for o in free_opts)), default=None)
        big = [o for o in free_opts if target is not None and o.total >= _per_node(shape.spec, o.host.view, target)]
        if not big:
            return []
        best = min(big, key=lambda o: (-o.host.free(o.kind), o.rank, o.host.name))
        return [best.host]
    best_hosts: list[_Host] = []
    best_key: tuple[int, str, str] | None = None
    for (storage, kind), members in _groups(o for o in free_opts if o.total >= shape.spec.nproc).items():
        if len(members) < shape.spec.nnodes:
            continue
        chosen = sorted(members, key=lambda o: (-o.host.free(o.kind), o.host.name))[: shape.spec.nnodes]
        key = (-sum(o.host.free(o.kind) for o in chosen), storage, kind)
        if best_key is None or key < best_key:
            best_hosts, best_key = [o.host for o in chosen], key
    return best_hosts


# ---------------------------------------------------------------------------------------------------------
# Preemption


def _victims_on(opt: _Option, need: int, priority: int, claimed: set[int]) -> list[_Victim] | None:
    """Victims on one host that free `need` units: lowest priority, then youngest, then none redundant."""
    free = opt.host.free(opt.kind)
    if need > opt.total:
        return None
    chosen: list[_Victim] = []
    for victim in opt.host.victims:
        if free >= need:
            break
        if victim.priority >= priority or victim.job_id in claimed or victim.frees(opt.kind) == 0:
            continue
        chosen.append(victim)
        free += victim.frees(opt.kind)
    if free < need:
        return None
    for victim in reversed(list(chosen)):  # drop the most valuable ones that are not needed after all
        if free - victim.frees(opt.kind) >= need:
            chosen.remove(victim)
            free -= victim.frees(opt.kind)
    return chosen


def _cost(victims: list[_Victim]) -> tuple[int, int]:
    return (max((v.priority for v in victims), default=-(10**9)), len(victims))


_Costed = tuple[tuple[int, int, int, str], int, _Option, list[_Victim]]  # (cost, rank, name), stamp, host, victims


@dataclass
class _VictimQuery:
    """The hosts where a job of one class, size and priority could preempt, cheapest first (a heap). Kept
    for the pass: a host's entry is stale once its stamp moved on, and each query first re-costs the hosts
    changed since the last one (the pass's change log from `seen` on), so the top valid entry is exactly
    what a scan of every host would pick."""

    heap: list[_Costed]
    seen: int


def _preempt_gang(shape: _Shape, priority: int, claimed: set[int]) -> tuple[list[_Host], list[_Victim]] | None:
    need, count = shape.spec.nproc, shape.spec.nnodes
    best: tuple[tuple[int, int, str], list[_Host], list[_Victim]] | None = None
    usable = [o for o in shape.options if o.host.reserved_by is None]
    for (storage, _kind), members in sorted(_groups(usable).items()):
        costed = []
        for opt in members:
            host = opt.host
            if (not host.victims or host.victims[0].priority >= priority) and host.free(opt.kind) < need:
                continue  # no room and nothing here it may stop: what _victims_on would say
            victims = _victims_on(opt, need, priority, claimed)
            if victims is not None:
                costed.append((_cost(victims), opt.host.name, opt.host, victims))
        if len(costed) < count:
            continue
        costed.sort(key=lambda c: (c[0], c[1]))
        chosen = costed[:count]
        union = {v.job_id: v for c in chosen for v in c[3]}
        key = (*_cost(list(union.values())), storage)
        if union and (best is None or key < best[0]):
            best = (key, [c[2] for c in chosen], list(union.values()))
    return (best[1], best[2]) if best else None


# ---------------------------------------------------------------------------------------------------------
# Pending reasons


def _most_free(parts: Sequence[_Index], mixed: bool, at_least: int = 0) -> str:
    """The hosts with `at_least` free or more, most free first then by name: the first few, "… and N more"."""
    counts = [part.at_least(at_least) for part in parts]
    firsts = [
        [(minus_free, name, i) for minus_free, name in part.everyone[: min(n, _LISTED_HOSTS)]]
        for i, (part, n) in enumerate(zip(parts, counts, strict=True))
    ]
    words = []
    for minus_free, name, i in list(heapq.merge(*firsts))[:_LISTED_HOSTS]:
        part = parts[i]
        total = part.total[name]
        unit = f" {_unit(part.kind, total)}" if mixed else ""
        words.append(f"{name} {-minus_free} of {total}{unit}")
    if sum(counts) > _LISTED_HOSTS:
        words.append(f"… and {sum(counts) - _LISTED_HOSTS} more")
    return ", ".join(words)


def _single_need(shape: _Shape) -> str:
    spec, kinds = shape.spec, shape.cls.kinds
    if spec.sync == "dataparallel":
        return "needs every GPU of one host free (sync 'dataparallel')"
    need = f"needs {spec.nproc} {_units(kinds, spec.nproc)} on one host"
    if len(shape.sizes) > 1:
        need += f" (or at least {shape.sizes[-1]}, elastic)"
    return need


def _gang_reason(shape: _Shape) -> str:
    spec, cls = shape.spec, shape.cls
    mixed = len(cls.kinds) > 1
    need = f"needs {spec.nnodes} hosts with {spec.nproc} free {_units(cls.kinds, spec.nproc)} each sharing a runs dir"
    fitting = sum(part.at_least(spec.nproc) for part in cls.parts)
    if fitting >= spec.nnodes:
        where = {
            f"{name}: {part.storage[name]}"
            for part in cls.parts
            for _, name in part.everyone[: part.at_least(spec.nproc)]
        }
        dirs = ", ".join(sorted(where)[:_LISTED_HOSTS])
        return f"{need}; enough hosts have room but no {spec.nnodes} of them share a runs dir ({dirs})"
    if not fitting:
        return f"{need}; no host has {spec.nproc} free (most free: {_most_free(cls.parts, mixed)})"
    return f"{need}; free: {_most_free(cls.parts, mixed, spec.nproc)}"


def _draining_note(shape: _Shape) -> str:
    """When only draining hosts are big enough: say so (the job waits for them to come back)."""
    spec, cls = shape.spec, shape.cls
    if not cls.draining:
        return ""
    big = [o for o in cls.options if o.total >= _per_node(spec, o.host.view, shape.smallest)]
    if len(big) >= spec.nnodes:
        return ""
    names = [h.name for h in cls.draining if _total(h, host_kind(spec, h) or GPU) >= _per_node(spec, h, shape.smallest)]
    if not names:
        return ""
    return f" ({', '.join(names[:_LISTED_HOSTS])}, big enough, {'is' if len(names) == 1 else 'are'} draining)"


def _blocker(shape: _Shape) -> Waiting | None:
    """The job whose reservation is all that keeps this one from starting, if any."""
    if shape.spec.nnodes > 1:
        gang = _best_gang(shape, ignore_reserved=True)
        hosts = [o.host for o in gang] if gang else []
    else:  # the free hosts could not hold it: would a reserved one?
        hosts = []
        for ranks in shape.sizes:
            name = next((n for part in shape.cls.parts if (n := part.first_fit(ranks, part.reserved))), None)
            if name is not None:
                hosts = [shape.cls.by_name[name].host]
                break
    owners = [h.reserved_by for h in hosts if h.reserved_by is not None]
    return min(owners, key=queue_order) if owners else None


# ---------------------------------------------------------------------------------------------------------
# One pass


class _Pass:
    def __init__(self, hosts: Sequence[HostView], usage: Sequence[Usage], team: Team | None = None) -> None:
        self.plan = Plan()
        self.team = team
        self.held: dict[int | None, dict[str, int]] = {}  # owner -> kind -> units her jobs hold (team only)
        for use in usage:
            held = self.held.setdefault(use.owner, {GPU: 0, SLOT: 0})
            for node in use.nodes:
                held[GPU] += len(node.gpus)
                held[SLOT] += node.slots
        self.pools: dict[str, list[_Host]] = {}
        self.all_pool_hosts: dict[str, list[HostView]] = {}
        self.version: dict[str, int] = {}  # bumped when a pool's free capacity or reservations change
        self.easy_reserved: set[str] = set()  # pools whose one EASY reservation is taken
        self.claimed: set[int] = set()  # victims already listed
        self.classes: dict[tuple[object, ...], _Class] = {}
        self.shapes: dict[tuple[object, ...], _Shape] = {}  # per demand (`_Shape`)
        self.host_sets: dict[tuple[object, ...], _Class] = {}  # (pool, device, sync) -> a class of those hosts
        self.indexes: dict[tuple[object, ...], _Index] = {}
        self.never: dict[tuple[object, ...], str | None] = {}
        self.changes: list[str] = []  # hosts whose free, reservation or victims changed, in order
        self.reservations: dict[int, list[str]] = {}  # job_id -> the hosts it reserved
        self.reserves = 0  # reservations made so far
        self.victim_hosts: dict[int, list[_Host]] = {}  # preemptible job_id -> the hosts it holds
        self.victim_queries: dict[tuple[object, ...], _VictimQuery] = {}
        self.by_name: dict[str, _Host] = {}
        for view in sorted(hosts, key=lambda h: h.name):
            self.all_pool_hosts.setdefault(view.pool, []).append(view)
            if not view.draining:
                host = self.by_name[view.name] = _Host(view, self.changes)
                self.pools.setdefault(view.pool, []).append(host)
        self._hold(usage)

    def _hold(self, usage: Sequence[Usage]) -> None:
        for use in usage:
            for node in use.nodes:
                host = self.by_name.get(node.host)
                if host is None:
                    continue
                host.hold(node)
                if use.preemptible:
                    held = sum(1 for g in node.gpus if g in host.view.gpus)
                    host.victims.append(_Victim(use.job_id, use.priority, held, node.slots))
                    self.victim_hosts.setdefault(use.job_id, []).append(host)
        for host in self.by_name.values():
            host.victims.sort(key=lambda v: (v.priority, -v.job_id))

    def shape(self, job: Waiting) -> _Shape:
        demand = _demand(job)
        shape = self.shapes.get(demand)
        if shape is None:
            shape = self.shapes[demand] = self.new_shape(job)
        return shape

    def new_shape(self, job: Waiting) -> _Shape:
        spec = job.spec
        if job.pool not in self.pools:
            empty = _Class([], [], 0, [])
            return _Shape(job.pool, spec, spec.elastic_sizes(), empty, _no_pool_reason(job.pool, self.all_pool_hosts))
        key = (job.pool, spec.device, spec.sync, spec.nnodes)
        cls = self.classes.get(key)
        if cls is None:
            cls = self.classes[key] = self.hosts_for(job).sized(spec.nnodes)
        shape = _Shape(job.pool, spec, spec.elastic_sizes(), cls)
        shape.never = self.never_reason(job, shape)
        return shape

    def hosts_for(self, job: Waiting) -> _Class:
        """The class of `job` with its hosts (shared by every nnodes: the hosts depend on pool, device, sync)."""
        spec = job.spec
        key = (job.pool, spec.device, spec.sync)
        cls = self.host_sets.get(key)
        if cls is None:
            options = []
            for host in self.pools[job.pool]:
                kind = host_kind(spec, host.view)
                if kind is not None:
                    options.append(_Option(host, kind, _total(host.view, kind)))
            draining = [h for h in self.all_pool_hosts[job.pool] if h.draining and host_kind(spec, h) is not None]
            most = max((o.total for o in options), default=0)
            parts = self.parts(options, whole=spec.sync == "dataparallel")
            cls = self.host_sets[key] = _Class(options, parts, most, draining, frozenset(o.kind for o in options))
        return cls

    def parts(self, options: list[_Option], whole: bool) -> list[_Index]:
        """The indexes of `options`, GPU hosts first; one per (kind, hosts), shared between classes."""
        parts = []
        for kind in (GPU, SLOT):
            hosts = [o.host for o in options if o.kind == kind]
            if not hosts:
                continue
            key = (kind, whole, tuple(h.name for h in hosts))
            if key not in self.indexes:
                self.indexes[key] = _Index(kind, hosts, whole)
            parts.append(self.indexes[key])
        return parts

    def never_reason(self, job: Waiting, shape: _Shape) -> str | None:
        """never_fits, skipped where the class's largest host settles it (single node)."""
        spec = shape.spec
        if spec.nnodes == 1 and spec.sync != "dataparallel" and 0 < shape.smallest <= shape.cls.max_total:
            return None
        if spec.sync == "dataparallel" and shape.options:  # a host of ≥ 2 GPUs, not draining
            return None
        if spec.nnodes > 1 and shape.cls.gang_could_fit(spec.nproc, spec.nnodes):
            return None
        key = (job.pool, spec.device, spec.sync, spec.nnodes, spec.nproc, tuple(shape.sizes))
        if key not in self.never:
            why = never_fits(spec, job.pool, self.all_pool_hosts[job.pool])
            self.never[key] = why or (None if shape.options else f"no host of pool '{job.pool}' can run it")
        return self.never[key]

    def consider(self, job: Waiting) -> None:
        shape = self.shape(job)
        if shape.never is not None:
            self.plan.pending[job.job_id] = shape.never
            return
        quota = self.team.quotas.get(job.owner) if self.team is not None and job.owner is not None else None
        if quota is not None and (over := self.beyond_quota(job, shape, quota)) is not None:
            self.plan.pending[job.job_id] = over
            return
        cls = shape.cls
        hopeless = cls.fit_failed is not None and shape.smallest >= cls.fit_failed
        if hopeless and job.pool in self.easy_reserved and self.preempt_hopeless(job, shape):
            # what `blocked` would say, without its steps: most of a long queue comes this way
            if shape.reason_at == self.version.get(job.pool, 0):
                self.plan.pending[job.job_id] = shape.reason
            else:
                self.plan.pending[job.job_id] = self.reason(shape)
            return
        fit = None if hopeless else _fit(shape)
        if fit is not None and quota is not None and (over := self.fit_beyond_quota(job, fit, quota)) is not None:
            fit = self.fit_other_kind(shape, fit[0][0].kind, quota, job)
            if fit is None:
                self.plan.pending[job.job_id] = over
                return
        if fit is not None:
            placed = _launch(job, *fit)
            self.plan.placements.append(placed)
            self.version[job.pool] = self.version.get(job.pool, 0) + 1
            held = self.held.setdefault(job.owner, {GPU: 0, SLOT: 0})
            for node in placed.nodes:
                held[GPU] += len(node.gpus)
                held[SLOT] += node.slots
            return
        cls.fit_failed = shape.smallest if cls.fit_failed is None else min(cls.fit_failed, shape.smallest)
        self.blocked(job, shape)

    def owner_held(self, owner: int | None, kind: str) -> int:
        return self.held.get(owner, {}).get(kind, 0)

    def beyond_quota(self, job: Waiting, shape: _Shape, quota: quotas.Quota) -> str | None:
        """The quota reason when the job's smallest size would take its owner past her quota on every
        kind of host it could use; None when some kind still has room."""
        need = quotas.least_units(job.spec)
        reason = None
        for kind in sorted(shape.cls.kinds):  # 'gpu' before 'slot': the GPU reason is the one named
            limit = quota.max_gpus if kind == GPU else quota.max_slots
            held = self.owner_held(job.owner, kind)
            if held + need <= limit:
                return None
            reason = reason or quotas.held_reason(quota, kind == GPU, held, need)
        return reason

    def fit_beyond_quota(self, job: Waiting, fit: tuple[list[_Option], int], quota: quotas.Quota) -> str | None:
        chosen, ranks = fit
        kind = chosen[0].kind
        units = sum(_per_node(job.spec, o.host.view, ranks) for o in chosen)
        limit = quota.max_gpus if kind == GPU else quota.max_slots
        held = self.owner_held(job.owner, kind)
        return quotas.held_reason(quota, kind == GPU, held, units) if held + units > limit else None

    def fit_other_kind(
        self, shape: _Shape, kind: str, quota: quotas.Quota, job: Waiting
    ) -> tuple[list[_Option], int] | None:
        """An 'auto' job whose best fit would pass its owner's quota of `kind`: a fit on the other kind, within it."""
        other = shape.cls.without(kind)
        if other is None:
            return None
        fit = _fit(_Shape(shape.pool, shape.spec, shape.sizes, other))
        return None if fit is None or self.fit_beyond_quota(job, fit, quota) is not None else fit

    def share(self, owner: int | None) -> float:
        """The owner's fair share now (core/fair_share.py): smaller goes first among equal priority."""
        assert self.team is not None
        held = self.held.get(owner, {})
        units = held.get(GPU, 0) + held.get(SLOT, 0)
        usage = self.team.usage.get(owner, 0.0) if owner is not None else 0.0
        return fair_share.share(usage, units, self.team.half_life_s)

    def blocked(self, job: Waiting, shape: _Shape) -> None:
        reason = self.reason(shape)  # before this job's own reservation changes the picture
        if self.try_preempt(job, shape):
            return
        if job.pool not in self.easy_reserved:
            hosts = _reservation(shape)
            if hosts:
                self.reserve(job, hosts)
                self.easy_reserved.add(job.pool)
        self.plan.pending[job.job_id] = reason

    def reason(self, shape: _Shape) -> str:
        """Why a job of this demand waits: the same words for all of them until the pool's free capacity or
        reservations change (its version)."""
        version = self.version.get(shape.pool, 0)
        if shape.reason_at != version:
            shape.reason_at, shape.reason = version, self.fresh_reason(shape)
        return shape.reason

    def fresh_reason(self, shape: _Shape) -> str:
        cls = shape.cls
        most = None  # the most free of a reserved host
        for part in cls.parts:
            if part.reserved and (most is None or part.reserved[-1][0] > most):
                most = part.reserved[-1][0]
        if most is not None and (shape.spec.sync == "dataparallel" or shape.smallest <= most):
            if shape.spec.nnodes > 1:  # depends on every host's free: said again
                blocked = self.blocked_reason(shape)
            else:  # depends on the reservations alone
                if shape.blocked_at != self.reserves:
                    shape.blocked_at, shape.blocked = self.reserves, self.blocked_reason(shape)
                blocked = shape.blocked
            if blocked is not None:
                return blocked
        if shape.spec.nnodes > 1:
            return _gang_reason(shape) + _draining_note(shape)
        if shape.need is None:
            shape.need = (_single_need(shape) + "; most free: ", _draining_note(shape))
        return shape.need[0] + cls.most_free_text() + shape.need[1]

    def blocked_reason(self, shape: _Shape) -> str | None:
        blocker = _blocker(shape)
        if blocker is None:
            return None
        names = sorted(n for n in self.reservations.get(blocker.job_id, ()) if n in shape.cls.by_name)
        where = " and ".join(names) if len(names) <= 2 else ", ".join(names)
        return f"waiting behind job {blocker.job_id} (priority {blocker.priority}), which has {where} reserved"

    def preempt_hopeless(self, job: Waiting, shape: _Shape) -> bool:
        """Preemption failed in this pass for a job of the class no bigger, of this priority or more."""
        failed = shape.cls.preempt_failed
        if shape.hopeless_at != len(shape.cls.preempt_failures):
            shape.hopeless_at = len(shape.cls.preempt_failures)
            shape.hopeless_below = max((p for ranks, p in failed.items() if ranks <= shape.smallest), default=None)
        return shape.hopeless_below is not None and job.priority <= shape.hopeless_below

    def try_preempt(self, job: Waiting, shape: _Shape) -> bool:
        if self.preempt_hopeless(job, shape):
            return False
        if shape.spec.nnodes > 1:
            found = _preempt_gang(shape, job.priority, self.claimed)
        else:
            found = self.preempt_single(shape, job.priority)
        if found is None:
            failed = shape.cls.preempt_failed
            failed[shape.smallest] = max(failed.get(shape.smallest, job.priority), job.priority)
            shape.cls.preempt_failures.append(shape.smallest)
            return False
        hosts, victims = found
        ids = sorted(v.job_id for v in victims)
        for victim_id in ids:
            self.plan.preempt[victim_id] = job.job_id
            self.claimed.add(victim_id)
            for host in self.victim_hosts.get(victim_id, ()):
                host.touch()  # one victim fewer there
        self.reserve(job, hosts)
        self.easy_reserved.add(job.pool)
        self.plan.pending[job.job_id] = f"waiting for preempted job(s) {', '.join(map(str, ids))} to checkpoint"
        return True

    def preempt_single(self, shape: _Shape, priority: int) -> tuple[list[_Host], list[_Victim]] | None:
        """On one host: the fullest size preemption can make room for, on the host whose victims have the
        lowest top priority, then fewest victims (GPU hosts first), ties by name."""
        for ranks in shape.sizes:
            found = self.cheapest_victims(shape, ranks, priority)
            if found is not None:
                return [found[0].host], found[1]
        return None

    def cheapest_victims(self, shape: _Shape, ranks: int, priority: int) -> tuple[_Option, list[_Victim]] | None:
        cls = shape.cls
        query = self.victim_queries.get((id(cls), ranks, priority))
        if query is None:
            query = self.victim_queries[(id(cls), ranks, priority)] = _VictimQuery([], 0)
            changed: Iterable[_Option] = cls.options
        else:
            changed = [cls.by_name[n] for n in dict.fromkeys(self.changes[query.seen :]) if n in cls.by_name]
        heap = query.heap
        for opt in changed:
            host = opt.host
            if host.reserved_by is not None or not host.victims or host.victims[0].priority >= priority:
                continue  # reserved, or nothing here it may stop (victims are lowest priority first)
            victims = _victims_on(opt, _per_node(shape.spec, host.view, ranks), priority, self.claimed)
            if victims:
                heapq.heappush(heap, ((*_cost(victims), opt.rank, host.name), host.stamp, opt, victims))
        query.seen = len(self.changes)
        while heap and (heap[0][2].host.reserved_by is not None or heap[0][2].host.stamp != heap[0][1]):
            heapq.heappop(heap)
        return (heap[0][2], heap[0][3]) if heap else None

    def reserve(self, job: Waiting, hosts: list[_Host]) -> None:
        for host in hosts:
            host.reserved_by = job
            self.plan.reserved[host.name] = job.job_id
            self.reservations.setdefault(job.job_id, []).append(host.name)
            for index in host.indexes:
                index.reserve(host)
            host.touch()
        self.reserves += 1
        self.version[job.pool] = self.version.get(job.pool, 0) + 1


def _no_pool_reason(pool: str, all_pool_hosts: dict[str, list[HostView]]) -> str:
    if pool in all_pool_hosts:
        names = ", ".join(h.name for h in all_pool_hosts[pool][:_LISTED_HOSTS])
        return f"every host of pool '{pool}' is draining ({names})"
    return f"no host serves pool '{pool}'"


def plan(
    waiting: Sequence[Waiting], hosts: Sequence[HostView], usage: Sequence[Usage], team: Team | None = None
) -> Plan:
    """One scheduling pass: what starts where, why the rest waits, and whom to preempt. Deterministic.
    With `team`: quotas, and fair share among equal priority (else queue_order alone)."""
    state = _Pass(hosts, usage, team)
    order = _queue_sorted(waiting) if team is None else _fair_order(waiting, state)
    for job in order:
        state.consider(job)
    return state.plan


def _queue_sorted(waiting: Sequence[Waiting]) -> list[Waiting]:
    """`sorted(waiting, key=queue_order)` in two stable sorts with C-level keys (a third of the time)."""
    order = sorted(waiting, key=attrgetter("created_at", "job_id"))
    order.sort(key=attrgetter("priority"), reverse=True)  # reverse keeps equal keys in their order
    return order


def _fair_order(waiting: Sequence[Waiting], state: _Pass) -> Iterator[Waiting]:
    """Priority desc; within a priority, the owner of smallest share next (her oldest job), her share
    read again after each of her jobs is considered (a placement raises it). O(n log owners)."""
    by_priority: dict[int, dict[int | None, list[Waiting]]] = {}
    for job in waiting:
        by_priority.setdefault(job.priority, {}).setdefault(job.owner, []).append(job)
    for priority in sorted(by_priority, reverse=True):
        queues = {owner: deque(sorted(jobs, key=queue_order)) for owner, jobs in by_priority[priority].items()}
        heap = [(state.share(owner), q[0].created_at, q[0].job_id, owner) for owner, q in queues.items()]
        heapq.heapify(heap)
        while heap:
            owner = heapq.heappop(heap)[3]
            yield queues[owner].popleft()  # considered (maybe placed) before we resume
            if queues[owner]:
                head = queues[owner][0]
                heapq.heappush(heap, (state.share(owner), head.created_at, head.job_id, owner))


# ---------------------------------------------------------------------------------------------------------
# Refusals at submit


def never_fits(spec: JobSpec, pool: str, hosts: Sequence[HostView]) -> str | None:
    """None when some host of `pool` could run `spec` (all of it free), else why none ever could and what
    to change. Compares with host totals; draining hosts count (they may come back)."""
    members = [h for h in hosts if h.pool == pool]
    if not members:
        pools = sorted({h.pool for h in hosts})
        where = f"submit to pool {', '.join(repr(p) for p in pools)}" if pools else "no host is registered yet"
        return f"no host serves pool '{pool}': {where}"
    reason = _device_refusal(spec, pool, members)
    if reason is not None:
        return reason
    options = [(h, k) for h in members if (k := host_kind(spec, h)) is not None]
    reason = _size_refusal(spec, pool, options)
    if reason is not None or spec.nnodes == 1:
        return reason
    return _nodes_refusal(spec, pool, options)


def _device_refusal(spec: JobSpec, pool: str, members: list[HostView]) -> str | None:
    largest_gpus = max(len(h.gpus) for h in members)
    if spec.sync == "dataparallel":
        if spec.device == "cpu":
            return "sync 'dataparallel' drives several GPUs: use device 'auto' or 'cuda', or sync 'ddp' on CPU"
        if largest_gpus < 2:
            return (
                f"sync 'dataparallel' needs a host with at least 2 GPUs; the largest in pool '{pool}' has "
                f"{largest_gpus}: use sync 'ddp'"
            )
    if spec.device == "cuda" and largest_gpus == 0:
        return f"device 'cuda' but no host of pool '{pool}' has a GPU: use device 'cpu' or 'auto'"
    return None


def _size_refusal(spec: JobSpec, pool: str, options: list[tuple[HostView, str]]) -> str | None:
    if spec.sync == "dataparallel" or not options:
        return None
    largest = max(_total(h, k) for h, k in options)
    kinds = {k for _, k in options}
    if any(w <= largest for w in spec.elastic_sizes()):
        return None
    if largest == 0:
        return f"no host of pool '{pool}' has {_units(kinds, 2)} for this job (all have 0): use another device or pool"
    if spec.min_nproc is not None:
        fitting = [w for w in range(largest, 0, -1) if spec.nproc * spec.accumulation_steps % w == 0]
        return (
            f"min_nproc {spec.min_nproc} is more than the largest host of pool '{pool}' has ({largest} "
            f"{_units(kinds, largest)}): "
            f"lower min_nproc to {fitting[0]}"
        )
    return (
        f"the job needs {spec.nproc} {_units(kinds, spec.nproc)} per host but the largest host of pool '{pool}' "
        f"has {largest}: lower nproc to {largest} (raise accumulation_steps to keep the global batch) or set min_nproc"
    )


def _nodes_refusal(spec: JobSpec, pool: str, options: list[tuple[HostView, str]]) -> str | None:
    big = [(h, k) for h, k in options if _total(h, k) >= spec.nproc]
    counts: dict[tuple[str, str], int] = {}
    for h, k in big:
        counts[(h.storage_id, k)] = counts.get((h.storage_id, k), 0) + 1
    sharing = max(counts.values(), default=0)
    if sharing >= spec.nnodes:
        return None
    if len(big) >= spec.nnodes:
        return (
            f"nnodes {spec.nnodes} needs {spec.nnodes} hosts that share a runs dir; pool '{pool}' has at most "
            f"{sharing} sharing one: lower nnodes to {sharing} (raise nproc or accumulation_steps to keep the "
            f"global batch), or set RANKZERO_API_URL on their workers (they then upload to the API's artifact "
            f"store and need no shared runs dir)"
        )
    unit = _units((k for _, k in options), spec.nproc)
    return (
        f"nnodes {spec.nnodes} needs {spec.nnodes} hosts with {spec.nproc} {unit} each; pool '{pool}' has "
        f"{len(big)}: lower nnodes to {max(len(big), 1)} (raise nproc or accumulation_steps to keep the global batch)"
    )
