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
capacity sorted (`Index`: best fit is a binary search, a placement moves one host in a few lists), jobs
of one demand share a `Shape` whose reason is said again only when the pool's capacity or reservations
change, and preemption keeps a heap per (class, size, priority) that re-costs only the hosts changed since
(`VictimQuery`). A pass costs about O(jobs + (placements + preemptions) × log hosts) plus a scan per
class set up and per gang preemption. tests/scheduler/placement_reference.py is the full pass this one must decide
as (tests/scheduler/test_placement_equivalence.py); bench/scheduler.py times both.

Stable across passes: the same inputs give the same plan. Jobs being preempted should be passed in `usage`
as they are (preemptible, until they exit): the next pass then names the same victims again instead of
picking more.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from operator import attrgetter

from core import fair_share, quotas
from core.placement_fit import easy_reservation, find_fit, place
from core.placement_index import Index, JobClass, Option, PassHost, Shape, Victim, demand_of
from core.placement_preempt import VictimQuery, preempt_gang, victim_cost, victims_on
from core.placement_reasons import blocking_job, draining_note, gang_reason, never_fits, no_pool_reason, single_need
from core.placement_types import (
    GPU,
    SLOT,
    HostView,
    NodePlacement,
    NodeUse,
    Placement,
    Plan,
    Team,
    Usage,
    Waiting,
    host_kind,
    host_total,
    per_node,
    queue_order,
)

# The placement's public face: the types (core/placement_types.py), the pass, and the submit-time refusal.
# The pass's parts live beside it: core/placement_index.py (state and indexes), placement_fit.py (best fit,
# gangs, EASY reservations), placement_preempt.py (victims), placement_reasons.py (pending reasons, never_fits).
__all__ = [
    "GPU",
    "SLOT",
    "HostView",
    "NodePlacement",
    "NodeUse",
    "Placement",
    "Plan",
    "Team",
    "Usage",
    "Waiting",
    "host_kind",
    "never_fits",
    "plan",
    "queue_order",
]

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
        self.pools: dict[str, list[PassHost]] = {}
        self.all_pool_hosts: dict[str, list[HostView]] = {}
        self.version: dict[str, int] = {}  # bumped when a pool's free capacity or reservations change
        self.easy_reserved: set[str] = set()  # pools whose one EASY reservation is taken
        self.claimed: set[int] = set()  # victims already listed
        self.classes: dict[tuple[object, ...], JobClass] = {}
        self.shapes: dict[tuple[object, ...], Shape] = {}  # per demand (`Shape`)
        self.host_sets: dict[tuple[object, ...], JobClass] = {}  # (pool, device, sync) -> a class of those hosts
        self.indexes: dict[tuple[object, ...], Index] = {}
        self.never: dict[tuple[object, ...], str | None] = {}
        self.changes: list[str] = []  # hosts whose free, reservation or victims changed, in order
        self.reservations: dict[int, list[str]] = {}  # job_id -> the hosts it reserved
        self.reserves = 0  # reservations made so far
        self.victim_hosts: dict[int, list[PassHost]] = {}  # preemptible job_id -> the hosts it holds
        self.victim_queries: dict[tuple[object, ...], VictimQuery] = {}
        self.by_name: dict[str, PassHost] = {}
        for view in sorted(hosts, key=lambda h: h.name):
            self.all_pool_hosts.setdefault(view.pool, []).append(view)
            if not view.draining:
                host = self.by_name[view.name] = PassHost(view, self.changes)
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
                    host.victims.append(Victim(use.job_id, use.priority, held, node.slots))
                    self.victim_hosts.setdefault(use.job_id, []).append(host)
        for host in self.by_name.values():
            host.victims.sort(key=lambda v: (v.priority, -v.job_id))

    def shape(self, job: Waiting) -> Shape:
        demand = demand_of(job)
        shape = self.shapes.get(demand)
        if shape is None:
            shape = self.shapes[demand] = self.new_shape(job)
        return shape

    def new_shape(self, job: Waiting) -> Shape:
        spec = job.spec
        if job.pool not in self.pools:
            empty = JobClass([], [], 0, [])
            return Shape(job.pool, spec, spec.elastic_sizes(), empty, no_pool_reason(job.pool, self.all_pool_hosts))
        key = (job.pool, spec.device, spec.sync, spec.nnodes)
        cls = self.classes.get(key)
        if cls is None:
            cls = self.classes[key] = self.hosts_for(job).sized(spec.nnodes)
        shape = Shape(job.pool, spec, spec.elastic_sizes(), cls)
        shape.never = self.never_reason(job, shape)
        return shape

    def hosts_for(self, job: Waiting) -> JobClass:
        """The class of `job` with its hosts (shared by every nnodes: the hosts depend on pool, device, sync)."""
        spec = job.spec
        key = (job.pool, spec.device, spec.sync)
        cls = self.host_sets.get(key)
        if cls is None:
            options = []
            for host in self.pools[job.pool]:
                kind = host_kind(spec, host.view)
                if kind is not None:
                    options.append(Option(host, kind, host_total(host.view, kind)))
            draining = [h for h in self.all_pool_hosts[job.pool] if h.draining and host_kind(spec, h) is not None]
            most = max((o.total for o in options), default=0)
            parts = self.parts(options, whole=spec.sync == "dataparallel")
            cls = self.host_sets[key] = JobClass(options, parts, most, draining, frozenset(o.kind for o in options))
        return cls

    def parts(self, options: list[Option], whole: bool) -> list[Index]:
        """The indexes of `options`, GPU hosts first; one per (kind, hosts), shared between classes."""
        parts = []
        for kind in (GPU, SLOT):
            hosts = [o.host for o in options if o.kind == kind]
            if not hosts:
                continue
            key = (kind, whole, tuple(h.name for h in hosts))
            if key not in self.indexes:
                self.indexes[key] = Index(kind, hosts, whole)
            parts.append(self.indexes[key])
        return parts

    def never_reason(self, job: Waiting, shape: Shape) -> str | None:
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
        fit = None if hopeless else find_fit(shape)
        if fit is not None and quota is not None and (over := self.fit_beyond_quota(job, fit, quota)) is not None:
            fit = self.fit_other_kind(shape, fit[0][0].kind, quota, job)
            if fit is None:
                self.plan.pending[job.job_id] = over
                return
        if fit is not None:
            placed = place(job, *fit)
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

    def beyond_quota(self, job: Waiting, shape: Shape, quota: quotas.Quota) -> str | None:
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

    def fit_beyond_quota(self, job: Waiting, fit: tuple[list[Option], int], quota: quotas.Quota) -> str | None:
        chosen, ranks = fit
        kind = chosen[0].kind
        units = sum(per_node(job.spec, o.host.view, ranks) for o in chosen)
        limit = quota.max_gpus if kind == GPU else quota.max_slots
        held = self.owner_held(job.owner, kind)
        return quotas.held_reason(quota, kind == GPU, held, units) if held + units > limit else None

    def fit_other_kind(
        self, shape: Shape, kind: str, quota: quotas.Quota, job: Waiting
    ) -> tuple[list[Option], int] | None:
        """An 'auto' job whose best fit would pass its owner's quota of `kind`: a fit on the other kind, within it."""
        other = shape.cls.without(kind)
        if other is None:
            return None
        fit = find_fit(Shape(shape.pool, shape.spec, shape.sizes, other))
        return None if fit is None or self.fit_beyond_quota(job, fit, quota) is not None else fit

    def share(self, owner: int | None) -> float:
        """The owner's fair share now (core/fair_share.py): smaller goes first among equal priority."""
        assert self.team is not None
        held = self.held.get(owner, {})
        units = held.get(GPU, 0) + held.get(SLOT, 0)
        usage = self.team.usage.get(owner, 0.0) if owner is not None else 0.0
        return fair_share.share(usage, units, self.team.half_life_s)

    def blocked(self, job: Waiting, shape: Shape) -> None:
        reason = self.reason(shape)  # before this job's own reservation changes the picture
        if self.try_preempt(job, shape):
            return
        if job.pool not in self.easy_reserved:
            hosts = easy_reservation(shape)
            if hosts:
                self.reserve(job, hosts)
                self.easy_reserved.add(job.pool)
        self.plan.pending[job.job_id] = reason

    def reason(self, shape: Shape) -> str:
        """Why a job of this demand waits: the same words for all of them until the pool's free capacity or
        reservations change (its version)."""
        version = self.version.get(shape.pool, 0)
        if shape.reason_at != version:
            shape.reason_at, shape.reason = version, self.fresh_reason(shape)
        return shape.reason

    def fresh_reason(self, shape: Shape) -> str:
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
            return gang_reason(shape) + draining_note(shape)
        if shape.need is None:
            shape.need = (single_need(shape) + "; most free: ", draining_note(shape))
        return shape.need[0] + cls.most_free_text() + shape.need[1]

    def blocked_reason(self, shape: Shape) -> str | None:
        blocker = blocking_job(shape)
        if blocker is None:
            return None
        names = sorted(n for n in self.reservations.get(blocker.job_id, ()) if n in shape.cls.by_name)
        where = " and ".join(names) if len(names) <= 2 else ", ".join(names)
        return f"waiting behind job {blocker.job_id} (priority {blocker.priority}), which has {where} reserved"

    def preempt_hopeless(self, job: Waiting, shape: Shape) -> bool:
        """Preemption failed in this pass for a job of the class no bigger, of this priority or more."""
        failed = shape.cls.preempt_failed
        if shape.hopeless_at != len(shape.cls.preempt_failures):
            shape.hopeless_at = len(shape.cls.preempt_failures)
            shape.hopeless_below = max((p for ranks, p in failed.items() if ranks <= shape.smallest), default=None)
        return shape.hopeless_below is not None and job.priority <= shape.hopeless_below

    def try_preempt(self, job: Waiting, shape: Shape) -> bool:
        if self.preempt_hopeless(job, shape):
            return False
        if shape.spec.nnodes > 1:
            found = preempt_gang(shape, job.priority, self.claimed)
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

    def preempt_single(self, shape: Shape, priority: int) -> tuple[list[PassHost], list[Victim]] | None:
        """On one host: the fullest size preemption can make room for, on the host whose victims have the
        lowest top priority, then fewest victims (GPU hosts first), ties by name."""
        for ranks in shape.sizes:
            found = self.cheapest_victims(shape, ranks, priority)
            if found is not None:
                return [found[0].host], found[1]
        return None

    def cheapest_victims(self, shape: Shape, ranks: int, priority: int) -> tuple[Option, list[Victim]] | None:
        cls = shape.cls
        query = self.victim_queries.get((id(cls), ranks, priority))
        if query is None:
            query = self.victim_queries[(id(cls), ranks, priority)] = VictimQuery([], 0)
            changed: Iterable[Option] = cls.options
        else:
            changed = [cls.by_name[n] for n in dict.fromkeys(self.changes[query.seen :]) if n in cls.by_name]
        heap = query.heap
        for opt in changed:
            host = opt.host
            if host.reserved_by is not None or not host.victims or host.victims[0].priority >= priority:
                continue  # reserved, or nothing here it may stop (victims are lowest priority first)
            victims = victims_on(opt, per_node(shape.spec, host.view, ranks), priority, self.claimed)
            if victims:
                heapq.heappush(heap, ((*victim_cost(victims), opt.rank, host.name), host.stamp, opt, victims))
        query.seen = len(self.changes)
        while heap and (heap[0][2].host.reserved_by is not None or heap[0][2].host.stamp != heap[0][1]):
            heapq.heappop(heap)
        return (heap[0][2], heap[0][3]) if heap else None

    def reserve(self, job: Waiting, hosts: list[PassHost]) -> None:
        for host in hosts:
            host.reserved_by = job
            self.plan.reserved[host.name] = job.job_id
            self.reservations.setdefault(job.job_id, []).append(host.name)
            for index in host.indexes:
                index.reserve(host)
            host.touch()
        self.reserves += 1
        self.version[job.pool] = self.version.get(job.pool, 0) + 1


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
