"""Today's full placement pass, kept verbatim as the specification of the fast one (issue 29).

`plan_reference` is `core/placement.py`'s `plan` as it was before the pass was indexed: every job of the
queue considered in order, scanning the hosts of its pool. It is not used by the scheduler, so it lives in
tests/, not in the product. Two things read it: tests/scheduler/test_placement_equivalence.py, which runs it
beside `plan` on random clusters and queues and requires identical decisions, and bench/scheduler.py, which
times it as the baseline of the fast pass. Change a rule in both, or the equivalence test fails.

The types (HostView, Usage, Waiting, Team, Placement, Plan, …) are core/placement.py's, so the two plans
compare with ==.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from core import fair_share, quotas
from core.placement import HostView, NodePlacement, NodeUse, Placement, Plan, Team, Usage, Waiting
from trainer.spec import JobSpec

GPU = "gpu"
SLOT = "slot"
_LISTED_HOSTS = 5  # hosts named in a pending reason before "… and N more"


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
    __slots__ = ("name", "reserved_by", "victims", "view", "free_gpus", "free_slots")

    def __init__(self, view: HostView) -> None:
        self.view = view
        self.name = view.name
        self.free_gpus: list[str] = list(view.gpus)
        self.free_slots = view.cpu_slots
        self.reserved_by: Waiting | None = None
        self.victims: list[_Victim] = []  # preemptible jobs here, lowest priority then youngest first

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
            taken, self.free_gpus = tuple(self.free_gpus[:n]), self.free_gpus[n:]
            return taken, 0
        self.free_slots -= n
        return (), n


@dataclass(frozen=True)
class _Victim:
    job_id: int
    priority: int
    gpus: int  # GPUs it holds on this host
    slots: int

    def frees(self, kind: str) -> int:
        return self.gpus if kind == GPU else self.slots


@dataclass(frozen=True)
class _Option:
    """A host a job shape can run on: its kind and the units its full size needs there."""

    host: _Host
    kind: str
    total: int

    @property
    def rank(self) -> int:  # GPU hosts first for 'auto'
        return 0 if self.kind == GPU else 1


@dataclass
class _Class:
    """Jobs alike but for their size: (pool, device, sync, nnodes). They run on the same hosts, and within a
    pass a failure is monotone in size (free capacity only shrinks; reservations and claimed victims only
    grow), so what failed for r ranks per node fails for every later job of the class needing ≥ r."""

    options: list[_Option]  # hosts of the pool that could ever run it
    max_total: int
    draining: list[HostView]  # hosts of the pool that could run it but are draining
    kinds: frozenset[str] = frozenset()  # GPU and/or SLOT
    fit_failed: int | None = None  # the fewest ranks per node that did not fit
    preempt_failed: dict[int, int] = field(default_factory=dict)  # ranks -> highest priority preemption failed
    free_list: tuple[int, str] = (-1, "")  # (pool version, "host-a 2 of 4, …") cached
    reserved: tuple[int, list[_Option], int] = (-1, [], 0)  # (pool version, reserved in best-fit order, max free)
    blocked: dict[tuple[int, ...], str | None] = field(default_factory=dict)  # sizes -> reason, this version


@dataclass
class _Shape:
    """One job's view: its class and sizes."""

    pool: str
    spec: JobSpec
    sizes: list[int]  # rank counts per node, largest first
    cls: _Class

    @property
    def options(self) -> list[_Option]:
        return self.cls.options

    @property
    def smallest(self) -> int:
        return self.sizes[-1]


# ---------------------------------------------------------------------------------------------------------
# Fitting


def _fits_key(opt: _Option) -> tuple[int, int, str]:
    return (opt.rank, opt.host.free(opt.kind), opt.host.name)


def _best_single(shape: _Shape, ranks: int, ignore_reserved: bool = False) -> _Option | None:
    """Best fit: the usable host with the least free capacity that still holds `ranks` ranks."""
    best: _Option | None = None
    best_key: tuple[int, int, str] | None = None
    for opt in shape.options:
        if opt.host.reserved_by is not None and not ignore_reserved:
            continue
        free = opt.host.free(opt.kind)
        if free < _per_node(shape.spec, opt.host.view, ranks):
            continue
        key = (opt.rank, free, opt.host.name)
        if best_key is None or key < best_key:
            best, best_key = opt, key
    return best


def _groups(options: Iterable[_Option]) -> dict[tuple[str, str], list[_Option]]:
    groups: dict[tuple[str, str], list[_Option]] = {}
    for opt in options:
        groups.setdefault((opt.host.view.storage_id, opt.kind), []).append(opt)
    return groups


def _best_gang(shape: _Shape, ignore_reserved: bool = False) -> list[_Option] | None:
    """N hosts of one runs dir and kind, each with nproc free: the tightest such set, else None."""
    need, count = shape.spec.nproc, shape.spec.nnodes
    fitting = [
        o for o in shape.options if (ignore_reserved or o.host.reserved_by is None) and o.host.free(o.kind) >= need
    ]
    best: list[_Option] | None = None
    best_key: tuple[int, int, str] | None = None
    for (storage, _kind), members in sorted(_groups(fitting).items()):
        if len(members) < count:
            continue
        chosen = sorted(members, key=_fits_key)[:count]
        key = (chosen[0].rank, sum(o.host.free(o.kind) for o in chosen), storage)
        if best_key is None or key < best_key:
            best, best_key = chosen, key
    return best


def _launch(job: Waiting, chosen: list[_Option], ranks: int) -> Placement:
    spec = job.spec
    nodes = []
    for rank, opt in enumerate(sorted(chosen, key=lambda o: o.host.name)):
        gpus, slots = opt.host.take(opt.kind, _per_node(spec, opt.host.view, ranks))
        nodes.append(NodePlacement(host=opt.host.name, node_rank=rank, gpus=gpus, slots=slots))
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
    """The host(s) a blocked job would take first: most free among those big enough, not yet reserved."""
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


def _preempt_single(shape: _Shape, priority: int, claimed: set[int]) -> tuple[list[_Host], list[_Victim]] | None:
    for ranks in shape.sizes:  # the fullest size that preemption can make room for
        best: tuple[tuple[int, int, int, str], _Option, list[_Victim]] | None = None
        for opt in shape.options:
            if opt.host.reserved_by is not None:
                continue
            victims = _victims_on(opt, _per_node(shape.spec, opt.host.view, ranks), priority, claimed)
            if not victims:
                continue
            key = (*_cost(victims), opt.rank, opt.host.name)
            if best is None or key < best[0]:
                best = (key, opt, victims)
        if best is not None:
            return [best[1].host], best[2]
    return None


def _preempt_gang(shape: _Shape, priority: int, claimed: set[int]) -> tuple[list[_Host], list[_Victim]] | None:
    need, count = shape.spec.nproc, shape.spec.nnodes
    best: tuple[tuple[int, int, str], list[_Host], list[_Victim]] | None = None
    usable = [o for o in shape.options if o.host.reserved_by is None]
    for (storage, _kind), members in sorted(_groups(usable).items()):
        costed = []
        for opt in members:
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


def _free_list(options: Sequence[_Option], mixed: bool) -> str:
    ordered = sorted(options, key=lambda o: (-o.host.free(o.kind), o.host.name))
    words = []
    for opt in ordered[:_LISTED_HOSTS]:
        unit = f" {_unit(opt.kind, opt.total)}" if mixed else ""
        words.append(f"{opt.host.name} {opt.host.free(opt.kind)} of {opt.total}{unit}")
    if len(ordered) > _LISTED_HOSTS:
        words.append(f"… and {len(ordered) - _LISTED_HOSTS} more")
    return ", ".join(words)


def _single_reason(shape: _Shape, free_list: str) -> str:
    spec, kinds = shape.spec, shape.cls.kinds
    if spec.sync == "dataparallel":
        need = "needs every GPU of one host free (sync 'dataparallel')"
    else:
        need = f"needs {spec.nproc} {_units(kinds, spec.nproc)} on one host"
        if len(shape.sizes) > 1:
            need += f" (or at least {shape.sizes[-1]}, elastic)"
    return f"{need}; most free: {free_list}"


def _gang_reason(shape: _Shape) -> str:
    spec, kinds = shape.spec, {o.kind for o in shape.options}
    need = f"needs {spec.nnodes} hosts with {spec.nproc} free {_units(kinds, spec.nproc)} each sharing a runs dir"
    fitting = [o for o in shape.options if o.host.free(o.kind) >= spec.nproc]
    if len(fitting) >= spec.nnodes:
        dirs = ", ".join(sorted({f"{o.host.name}: {o.host.view.storage_id}" for o in fitting})[:_LISTED_HOSTS])
        return f"{need}; enough hosts have room but no {spec.nnodes} of them share a runs dir ({dirs})"
    if not fitting:
        return f"{need}; no host has {spec.nproc} free (most free: {_free_list(shape.options, len(kinds) > 1)})"
    return f"{need}; free: {_free_list(fitting, len(kinds) > 1)}"


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


def _blocker(shape: _Shape, reserved: list[_Option]) -> Waiting | None:
    """The job whose reservation is all that keeps this one from starting, if any. `reserved`: the
    reserved options in best-fit order."""
    if not reserved:
        return None
    if shape.spec.nnodes > 1:
        gang = _best_gang(shape, ignore_reserved=True)
        hosts = [o.host for o in gang] if gang else []
    else:  # the free hosts could not hold it: would a reserved one?
        hosts = []
        for ranks in shape.sizes:
            opt = next((o for o in reserved if o.host.free(o.kind) >= _per_node(shape.spec, o.host.view, ranks)), None)
            if opt is not None:
                hosts = [opt.host]
                break
    owners = [h.reserved_by for h in hosts if h.reserved_by is not None]
    return min(owners, key=queue_order) if owners else None


def _reserved_names(shape: _Shape, owner: Waiting) -> str:
    names = sorted(o.host.name for o in shape.options if o.host.reserved_by is owner)
    return " and ".join(names) if len(names) <= 2 else ", ".join(names)


def _blocked_reason(shape: _Shape, reserved: list[_Option]) -> str | None:
    blocker = _blocker(shape, reserved)
    if blocker is None:
        return None
    return (
        f"waiting behind job {blocker.job_id} (priority {blocker.priority}), which has "
        f"{_reserved_names(shape, blocker)} reserved"
    )


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
        self.reserve_version: dict[str, int] = {}  # bumped when a pool's reservations change (reserved hosts'
        # free capacity never changes after: nothing else is placed on them)
        self.easy_reserved: set[str] = set()  # pools whose one EASY reservation is taken
        self.claimed: set[int] = set()  # victims already listed
        self.classes: dict[tuple[object, ...], _Class] = {}
        self.never: dict[tuple[object, ...], str | None] = {}
        by_name: dict[str, _Host] = {}
        for view in sorted(hosts, key=lambda h: h.name):
            self.all_pool_hosts.setdefault(view.pool, []).append(view)
            if not view.draining:
                host = by_name[view.name] = _Host(view)
                self.pools.setdefault(view.pool, []).append(host)
        self._hold(usage, by_name)

    @staticmethod
    def _hold(usage: Sequence[Usage], by_name: dict[str, _Host]) -> None:
        for use in usage:
            for node in use.nodes:
                host = by_name.get(node.host)
                if host is None:
                    continue
                host.hold(node)
                if use.preemptible:
                    held = sum(1 for g in node.gpus if g in host.view.gpus)
                    host.victims.append(_Victim(use.job_id, use.priority, held, node.slots))
        for host in by_name.values():
            host.victims.sort(key=lambda v: (v.priority, -v.job_id))

    def shape(self, job: Waiting) -> _Shape:
        spec = job.spec
        key = (job.pool, spec.device, spec.sync, spec.nnodes)
        cls = self.classes.get(key)
        if cls is None:
            options = []
            for host in self.pools.get(job.pool, []):
                kind = host_kind(spec, host.view)
                if kind is not None:
                    options.append(_Option(host, kind, _total(host.view, kind)))
            draining = [h for h in self.all_pool_hosts[job.pool] if h.draining and host_kind(spec, h) is not None]
            most = max((o.total for o in options), default=0)
            cls = self.classes[key] = _Class(options, most, draining, frozenset(o.kind for o in options))
        return _Shape(job.pool, spec, spec.elastic_sizes(), cls)

    def never_reason(self, job: Waiting, shape: _Shape) -> str | None:
        """never_fits, skipped where the class's largest host settles it (single node)."""
        spec = shape.spec
        if spec.nnodes == 1 and spec.sync != "dataparallel" and 0 < shape.smallest <= shape.cls.max_total:
            return None
        key = (job.pool, spec.device, spec.sync, spec.nnodes, spec.nproc, tuple(shape.sizes))
        if key not in self.never:
            why = never_fits(spec, job.pool, self.all_pool_hosts[job.pool])
            self.never[key] = why or (None if shape.options else f"no host of pool '{job.pool}' can run it")
        return self.never[key]

    def consider(self, job: Waiting) -> None:
        if job.pool not in self.pools:
            self.plan.pending[job.job_id] = _no_pool_reason(job.pool, self.all_pool_hosts)
            return
        shape = self.shape(job)
        never = self.never_reason(job, shape)
        if never is not None:
            self.plan.pending[job.job_id] = never
            return
        quota = self.team.quotas.get(job.owner) if self.team is not None and job.owner is not None else None
        if quota is not None and (over := self.beyond_quota(job, shape, quota)) is not None:
            self.plan.pending[job.job_id] = over
            return
        cls = shape.cls
        hopeless = cls.fit_failed is not None and shape.smallest >= cls.fit_failed
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
        others = [o for o in shape.options if o.kind != kind]
        if not others:
            return None
        cls = _Class(others, max(o.total for o in others), [], frozenset(o.kind for o in others))
        fit = _fit(_Shape(shape.pool, shape.spec, shape.sizes, cls))
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
        version = self.version.get(shape.pool, 0)
        cls = shape.cls
        # a gang's "would it fit but for reservations" also counts the unreserved hosts, which change more often
        blocked_version = version if shape.spec.nnodes > 1 else self.reserve_version.get(shape.pool, 0)
        if cls.reserved[0] != blocked_version:
            reserved = sorted((o for o in cls.options if o.host.reserved_by is not None), key=_fits_key)
            cls.reserved = (blocked_version, reserved, max((o.host.free(o.kind) for o in reserved), default=0))
            cls.blocked = {}
        _, reserved, most = cls.reserved
        if reserved and (shape.spec.sync == "dataparallel" or shape.smallest <= most):
            sizes = tuple(shape.sizes)
            if sizes not in cls.blocked:
                cls.blocked[sizes] = _blocked_reason(shape, reserved)
            if (blocked := cls.blocked[sizes]) is not None:
                return blocked
        if shape.spec.nnodes > 1:
            return _gang_reason(shape) + _draining_note(shape)
        if cls.free_list[0] != version:
            cls.free_list = (version, _free_list(cls.options, len(cls.kinds) > 1))
        return _single_reason(shape, cls.free_list[1]) + _draining_note(shape)

    def preempt_hopeless(self, job: Waiting, shape: _Shape) -> bool:
        failed = shape.cls.preempt_failed
        return any(ranks <= shape.smallest and job.priority <= prio for ranks, prio in failed.items())

    def try_preempt(self, job: Waiting, shape: _Shape) -> bool:
        if self.preempt_hopeless(job, shape):
            return False
        if shape.spec.nnodes > 1:
            found = _preempt_gang(shape, job.priority, self.claimed)
        else:
            found = _preempt_single(shape, job.priority, self.claimed)
        if found is None:
            failed = shape.cls.preempt_failed
            failed[shape.smallest] = max(failed.get(shape.smallest, job.priority), job.priority)
            return False
        hosts, victims = found
        ids = sorted(v.job_id for v in victims)
        for victim_id in ids:
            self.plan.preempt[victim_id] = job.job_id
            self.claimed.add(victim_id)
        self.reserve(job, hosts)
        self.easy_reserved.add(job.pool)
        self.plan.pending[job.job_id] = f"waiting for preempted job(s) {', '.join(map(str, ids))} to checkpoint"
        return True

    def reserve(self, job: Waiting, hosts: list[_Host]) -> None:
        for host in hosts:
            host.reserved_by = job
            self.plan.reserved[host.name] = job.job_id
        self.version[job.pool] = self.version.get(job.pool, 0) + 1
        self.reserve_version[job.pool] = self.reserve_version.get(job.pool, 0) + 1


def _no_pool_reason(pool: str, all_pool_hosts: dict[str, list[HostView]]) -> str:
    if pool in all_pool_hosts:
        names = ", ".join(h.name for h in all_pool_hosts[pool][:_LISTED_HOSTS])
        return f"every host of pool '{pool}' is draining ({names})"
    return f"no host serves pool '{pool}'"


def plan_reference(
    waiting: Sequence[Waiting], hosts: Sequence[HostView], usage: Sequence[Usage], team: Team | None = None
) -> Plan:
    """One scheduling pass: what starts where, why the rest waits, and whom to preempt. Deterministic.
    With `team`: quotas, and fair share among equal priority (else queue_order alone)."""
    state = _Pass(hosts, usage, team)
    order = sorted(waiting, key=queue_order) if team is None else _fair_order(waiting, state)
    for job in order:
        state.consider(job)
    return state.plan


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
