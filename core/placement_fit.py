"""Fitting a job in one placement pass (core/placement.py): best fit on one host (elastic: the largest size
that fits), a gang of hosts sharing a runs dir, the placement it makes, and the hosts a blocked job reserves
(EASY backfill)."""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from core.placement_index import Entry, Option, PassHost, Shape
from core.placement_types import (
    NodePlacement,
    Placement,
    Waiting,
    per_node,
)

# ---------------------------------------------------------------------------------------------------------
# Fitting


def best_single(shape: Shape, ranks: int) -> Option | None:
    """Best fit: the unreserved host with the least free capacity that still holds `ranks` ranks (GPU hosts
    first), ties by name."""
    for part in shape.cls.parts:
        name = part.first_fit(ranks, part.open)
        if name is not None:
            return shape.cls.by_name[name]
    return None


def host_groups(options: Iterable[Option]) -> dict[tuple[str, str], list[Option]]:
    groups: dict[tuple[str, str], list[Option]] = {}
    for opt in options:
        groups.setdefault((opt.host.view.storage_id, opt.kind), []).append(opt)
    return groups


def best_gang(shape: Shape, ignore_reserved: bool = False) -> list[Option] | None:
    """N hosts of one runs dir and kind, each with nproc free: the tightest such set, else None."""
    need, count = shape.spec.nproc, shape.spec.nnodes
    best: list[Entry] | None = None
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


def place(job: Waiting, chosen: list[Option], ranks: int) -> Placement:
    spec = job.spec
    whole = spec.sync == "dataparallel"  # every GPU of the host (`per_node`)
    nodes = []
    for rank, opt in enumerate(chosen if len(chosen) == 1 else sorted(chosen, key=lambda o: o.host.name)):
        gpus, slots = opt.host.take(opt.kind, len(opt.host.view.gpus) if whole else ranks)
        nodes.append(NodePlacement(opt.host.name, rank, gpus, slots))
    accumulation = spec.nproc * spec.accumulation_steps // ranks
    return Placement(job.job_id, tuple(nodes), ranks, accumulation, spec.nproc)


def find_fit(shape: Shape) -> tuple[list[Option], int] | None:
    """The hosts and ranks per node the shape starts on now, or None."""
    if shape.spec.nnodes > 1:
        gang = best_gang(shape)
        return (gang, shape.spec.nproc) if gang else None
    for ranks in shape.sizes:  # full size first; smaller (elastic) only when it fits nowhere
        opt = best_single(shape, ranks)
        if opt is not None:
            return [opt], ranks
    return None


# ---------------------------------------------------------------------------------------------------------
# Reservations (EASY backfill)


def easy_reservation(shape: Shape) -> list[PassHost]:
    """The host(s) a blocked job would take first: most free among those big enough, not yet reserved.
    Once per pool and pass, so a scan."""
    free_opts = [o for o in shape.options if o.host.reserved_by is None]
    if shape.spec.nnodes == 1:
        target = max((r for r in shape.sizes if any(o.total >= r for o in free_opts)), default=None)
        big = [o for o in free_opts if target is not None and o.total >= per_node(shape.spec, o.host.view, target)]
        if not big:
            return []
        best = min(big, key=lambda o: (-o.host.free(o.kind), o.rank, o.host.name))
        return [best.host]
    best_hosts: list[PassHost] = []
    best_key: tuple[int, str, str] | None = None
    for (storage, kind), members in host_groups(o for o in free_opts if o.total >= shape.spec.nproc).items():
        if len(members) < shape.spec.nnodes:
            continue
        chosen = sorted(members, key=lambda o: (-o.host.free(o.kind), o.host.name))[: shape.spec.nnodes]
        key = (-sum(o.host.free(o.kind) for o in chosen), storage, kind)
        if best_key is None or key < best_key:
            best_hosts, best_key = [o.host for o in chosen], key
    return best_hosts
