"""The state of one placement pass (core/placement.py): each host's free capacity, the preemptible jobs on it,
and the indexes that keep a set of hosts sorted by free capacity, so that best fit is a binary search instead
of a scan of the pool (issue 29). Jobs alike but for their size share a class (`JobClass`), jobs of one
demand a `Shape`."""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter

from core.placement_types import (
    GPU,
    LISTED_HOSTS,
    HostView,
    NodeUse,
    Waiting,
    host_total,
    unit_word,
)
from trainer.spec import JobSpec

# ---------------------------------------------------------------------------------------------------------
# A host's state during one pass


class PassHost:
    __slots__ = ("name", "reserved_by", "victims", "view", "free_gpus", "free_slots", "indexes", "stamp", "changes")

    def __init__(self, view: HostView, changes: list[str]) -> None:
        self.view = view
        self.name = view.name
        self.free_gpus: list[str] = list(view.gpus)
        self.free_slots = view.cpu_slots
        self.reserved_by: Waiting | None = None
        self.victims: list[Victim] = []  # preemptible jobs here, lowest priority then youngest first
        self.indexes: list[Index] = []  # the free-capacity indexes that list this host
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
class Victim:
    job_id: int
    priority: int
    gpus: int  # GPUs it holds on this host
    slots: int

    def frees(self, kind: str) -> int:
        return self.gpus if kind == GPU else self.slots


class Option:
    """A host a job shape can run on: its kind and the units its full size needs there."""

    __slots__ = ("host", "kind", "total", "rank")

    def __init__(self, host: PassHost, kind: str, total: int) -> None:
        self.host = host
        self.kind = kind
        self.total = total
        self.rank = 0 if kind == GPU else 1  # GPU hosts first for 'auto'


Entry = tuple[int, str]  # (free units, host name)


def _insert(entries: list[Entry], entry: Entry) -> None:
    bisect.insort(entries, entry)


def _remove(entries: list[Entry], entry: Entry) -> None:
    del entries[bisect.bisect_left(entries, entry)]


class Index:
    """The free capacity of one kind on a set of a pool's hosts, kept sorted while the pass places jobs, so
    that best fit is a binary search instead of a scan of the pool (issue 29). Classes whose hosts and kind
    are the same share one. `open`: unreserved hosts by (free, name), for 'dataparallel' (`whole`) only
    those with every GPU free; `everyone`: every host by (-free, name), the order of the reasons' "most
    free"; `reserved`: reserved hosts by (free, name), whose free no longer changes in the pass (nothing is
    placed on them); and per runs dir the unreserved and all hosts by (free, name), for gangs."""

    def __init__(self, kind: str, hosts: list[PassHost], whole: bool) -> None:
        self.kind = kind
        self.rank = 0 if kind == GPU else 1
        self.whole = whole
        self.total = {h.name: host_total(h.view, kind) for h in hosts}
        self.storage = {h.name: h.view.storage_id for h in hosts}
        self.everyone = sorted((-h.free(kind), h.name) for h in hosts)
        self.open: list[Entry] = []
        self.reserved: list[Entry] = []
        self.open_by_dir: dict[str, list[Entry]] = {}
        self.all_by_dir: dict[str, list[Entry]] = {}
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

    def _is_open(self, entry: Entry) -> bool:
        return not self.whole or entry[0] == self.total[entry[1]]

    def moved(self, host: PassHost, before: int) -> None:
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

    def reserve(self, host: PassHost) -> None:
        entry = (host.free(self.kind), host.name)
        if self._is_open(entry):
            _remove(self.open, entry)
        _remove(self.open_by_dir[self.storage[host.name]], entry)
        _insert(self.reserved, entry)

    def first_fit(self, need: int, entries: list[Entry]) -> str | None:
        """The host of `entries` with the least free that holds `need` per node (whole: every GPU), by name."""
        if self.whole:
            return next((name for free, name in entries if free >= self.total[name]), None)
        i = bisect.bisect_left(entries, (need,))
        return entries[i][1] if i < len(entries) else None

    def at_least(self, need: int) -> int:
        """How many hosts have `need` or more free."""
        return bisect.bisect_left(self.everyone, (1 - need,))


@dataclass
class JobClass:
    """Jobs alike but for their size: (pool, device, sync, nnodes). They run on the same hosts, and within a
    pass a failure is monotone in size (free capacity only shrinks; reservations and claimed victims only
    grow), so what failed for r ranks per node fails for every later job of the class needing ≥ r."""

    options: list[Option]  # hosts of the pool that could ever run it, by name
    parts: list[Index]  # their free capacity, GPU hosts before CPU hosts
    max_total: int
    draining: list[HostView]  # hosts of the pool that could run it but are draining
    kinds: frozenset[str] = frozenset()  # GPU and/or SLOT
    by_name: dict[str, Option] = field(default_factory=dict)
    fit_failed: int | None = None  # the fewest ranks per node that did not fit
    preempt_failed: dict[int, int] = field(default_factory=dict)  # ranks -> highest priority preemption failed
    preempt_failures: list[int] = field(default_factory=list)  # each failure's ranks, in order (a version)
    most_free: tuple[object, str] = ((), "")  # (the first hosts of each part, "host-a 2 of 4, …") last said
    others: dict[str, JobClass] = field(default_factory=dict)  # the same hosts without one kind (quotas)

    def __post_init__(self) -> None:
        if not self.by_name:
            self.by_name = {o.host.name: o for o in self.options}

    def sized(self, nnodes: int) -> JobClass:
        """A class of the same hosts with state of its own (one per nnodes)."""
        return JobClass(self.options, self.parts, self.max_total, self.draining, self.kinds, self.by_name)

    def most_free_text(self) -> str:
        """The class's "most free" list, formatted again only when its first hosts or their free changed
        (best fit mostly fills the fullest hosts, so a placement rarely moves the most free ones)."""
        firsts = tuple(tuple(part.everyone[:LISTED_HOSTS]) for part in self.parts)
        if firsts != self.most_free[0]:
            self.most_free = (firsts, most_free_words(self.parts, len(self.kinds) > 1))
        return self.most_free[1]

    def gang_could_fit(self, nproc: int, nnodes: int) -> bool:
        """Some runs dir and kind has `nnodes` hosts of `nproc` or more in all: never_fits would say None."""
        for part in self.parts:
            for names in part.names_by_dir.values():
                if sum(1 for name in names if part.total[name] >= nproc) >= nnodes:
                    return True
        return False

    def without(self, kind: str) -> JobClass | None:
        """This class on its hosts of the other kind only ('auto' past a quota of `kind`), or None."""
        if kind not in self.others:
            options = [o for o in self.options if o.kind != kind]
            parts = [p for p in self.parts if p.kind != kind]
            most = max((o.total for o in options), default=0)
            self.others[kind] = JobClass(options, parts, most, [], frozenset(o.kind for o in options))
        other = self.others[kind]
        return other if other.options else None


# All that placement reads of a queued job but its id, priority, age and owner (one C call per job).
demand_of = attrgetter(
    "pool", "spec.device", "spec.sync", "spec.nnodes", "spec.nproc", "spec.min_nproc", "spec.accumulation_steps"
)


@dataclass
class Shape:
    """What every job of one demand needs: (pool, device, sync, nnodes, nproc, min_nproc, accumulation_steps)
    — all that placement reads of a spec but its priority and owner. Made once per pass and demand."""

    pool: str
    spec: JobSpec  # the first such job's: the others differ only where placement does not look
    sizes: list[int]  # rank counts per node, largest first
    cls: JobClass
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
    def options(self) -> list[Option]:
        return self.cls.options


def most_free_words(parts: Sequence[Index], mixed: bool, at_least: int = 0) -> str:
    """The hosts with `at_least` free or more, most free first then by name: the first few, "… and N more"."""
    counts = [part.at_least(at_least) for part in parts]
    firsts = [
        [(minus_free, name, i) for minus_free, name in part.everyone[: min(n, LISTED_HOSTS)]]
        for i, (part, n) in enumerate(zip(parts, counts, strict=True))
    ]
    words = []
    for minus_free, name, i in list(heapq.merge(*firsts))[:LISTED_HOSTS]:
        part = parts[i]
        total = part.total[name]
        unit = f" {unit_word(part.kind, total)}" if mixed else ""
        words.append(f"{name} {-minus_free} of {total}{unit}")
    if sum(counts) > LISTED_HOSTS:
        words.append(f"… and {sum(counts) - LISTED_HOSTS} more")
    return ", ".join(words)
