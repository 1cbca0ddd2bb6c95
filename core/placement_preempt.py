"""Preemption in one placement pass (core/placement.py): which preemptible jobs of lower priority to stop on a
host, what they cost, and the cheapest set of hosts for a gang."""

from __future__ import annotations

from dataclasses import dataclass

from core.placement_fit import host_groups
from core.placement_index import Option, PassHost, Shape, Victim

# ---------------------------------------------------------------------------------------------------------
# Preemption


def victims_on(opt: Option, need: int, priority: int, claimed: set[int]) -> list[Victim] | None:
    """Victims on one host that free `need` units: lowest priority, then youngest, then none redundant."""
    free = opt.host.free(opt.kind)
    if need > opt.total:
        return None
    chosen: list[Victim] = []
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


def victim_cost(victims: list[Victim]) -> tuple[int, int]:
    return (max((v.priority for v in victims), default=-(10**9)), len(victims))


Costed = tuple[tuple[int, int, int, str], int, Option, list[Victim]]  # (cost, rank, name), stamp, host, victims


@dataclass
class VictimQuery:
    """The hosts where a job of one class, size and priority could preempt, cheapest first (a heap). Kept
    for the pass: a host's entry is stale once its stamp moved on, and each query first re-costs the hosts
    changed since the last one (the pass's change log from `seen` on), so the top valid entry is exactly
    what a scan of every host would pick."""

    heap: list[Costed]
    seen: int


def preempt_gang(shape: Shape, priority: int, claimed: set[int]) -> tuple[list[PassHost], list[Victim]] | None:
    need, count = shape.spec.nproc, shape.spec.nnodes
    best: tuple[tuple[int, int, str], list[PassHost], list[Victim]] | None = None
    usable = [o for o in shape.options if o.host.reserved_by is None]
    for (storage, _kind), members in sorted(host_groups(usable).items()):
        costed = []
        for opt in members:
            host = opt.host
            if (not host.victims or host.victims[0].priority >= priority) and host.free(opt.kind) < need:
                continue  # no room and nothing here it may stop: what victims_on would say
            victims = victims_on(opt, need, priority, claimed)
            if victims is not None:
                costed.append((victim_cost(victims), opt.host.name, opt.host, victims))
        if len(costed) < count:
            continue
        costed.sort(key=lambda c: (c[0], c[1]))
        chosen = costed[:count]
        union = {v.job_id: v for c in chosen for v in c[3]}
        key = (*victim_cost(list(union.values())), storage)
        if union and (best is None or key < best[0]):
            best = (key, [c[2] for c in chosen], list(union.values()))
    return (best[1], best[2]) if best else None
