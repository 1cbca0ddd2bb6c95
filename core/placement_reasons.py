"""Why a job waits, in words (core/placement.py): what it needs, where the most free capacity is, whose
reservation it waits behind, which draining hosts would be big enough; and `never_fits`, the submit-time
refusal against host totals, which says what to change."""

from __future__ import annotations

from collections.abc import Sequence

from core.placement_fit import best_gang
from core.placement_index import Shape, most_free_words
from core.placement_types import (
    GPU,
    LISTED_HOSTS,
    HostView,
    Waiting,
    host_kind,
    host_total,
    per_node,
    queue_order,
    units_word,
)
from trainer.spec import JobSpec

# ---------------------------------------------------------------------------------------------------------
# Pending reasons


def single_need(shape: Shape) -> str:
    spec, kinds = shape.spec, shape.cls.kinds
    if spec.sync == "dataparallel":
        return "needs every GPU of one host free (sync 'dataparallel')"
    need = f"needs {spec.nproc} {units_word(kinds, spec.nproc)} on one host"
    if len(shape.sizes) > 1:
        need += f" (or at least {shape.sizes[-1]}, elastic)"
    return need


def gang_reason(shape: Shape) -> str:
    spec, cls = shape.spec, shape.cls
    mixed = len(cls.kinds) > 1
    need = (
        f"needs {spec.nnodes} hosts with {spec.nproc} free {units_word(cls.kinds, spec.nproc)} each sharing a runs dir"
    )
    fitting = sum(part.at_least(spec.nproc) for part in cls.parts)
    if fitting >= spec.nnodes:
        where = {
            f"{name}: {part.storage[name]}"
            for part in cls.parts
            for _, name in part.everyone[: part.at_least(spec.nproc)]
        }
        dirs = ", ".join(sorted(where)[:LISTED_HOSTS])
        return f"{need}; enough hosts have room but no {spec.nnodes} of them share a runs dir ({dirs})"
    if not fitting:
        return f"{need}; no host has {spec.nproc} free (most free: {most_free_words(cls.parts, mixed)})"
    return f"{need}; free: {most_free_words(cls.parts, mixed, spec.nproc)}"


def draining_note(shape: Shape) -> str:
    """When only draining hosts are big enough: say so (the job waits for them to come back)."""
    spec, cls = shape.spec, shape.cls
    if not cls.draining:
        return ""
    big = [o for o in cls.options if o.total >= per_node(spec, o.host.view, shape.smallest)]
    if len(big) >= spec.nnodes:
        return ""
    names = [
        h.name for h in cls.draining if host_total(h, host_kind(spec, h) or GPU) >= per_node(spec, h, shape.smallest)
    ]
    if not names:
        return ""
    return f" ({', '.join(names[:LISTED_HOSTS])}, big enough, {'is' if len(names) == 1 else 'are'} draining)"


def blocking_job(shape: Shape) -> Waiting | None:
    """The job whose reservation is all that keeps this one from starting, if any."""
    if shape.spec.nnodes > 1:
        gang = best_gang(shape, ignore_reserved=True)
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


def no_pool_reason(pool: str, all_pool_hosts: dict[str, list[HostView]]) -> str:
    if pool in all_pool_hosts:
        names = ", ".join(h.name for h in all_pool_hosts[pool][:LISTED_HOSTS])
        return f"every host of pool '{pool}' is draining ({names})"
    return f"no host serves pool '{pool}'"


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
    largest = max(host_total(h, k) for h, k in options)
    kinds = {k for _, k in options}
    if any(w <= largest for w in spec.elastic_sizes()):
        return None
    if largest == 0:
        return (
            f"no host of pool '{pool}' has {units_word(kinds, 2)} for this job (all have 0): use another device or pool"
        )
    if spec.min_nproc is not None:
        fitting = [w for w in range(largest, 0, -1) if spec.nproc * spec.accumulation_steps % w == 0]
        return (
            f"min_nproc {spec.min_nproc} is more than the largest host of pool '{pool}' has ({largest} "
            f"{units_word(kinds, largest)}): "
            f"lower min_nproc to {fitting[0]}"
        )
    return (
        f"the job needs {spec.nproc} {units_word(kinds, spec.nproc)} per host but the largest host of pool '{pool}' "
        f"has {largest}: lower nproc to {largest} (raise accumulation_steps to keep the global batch) or set min_nproc"
    )


def _nodes_refusal(spec: JobSpec, pool: str, options: list[tuple[HostView, str]]) -> str | None:
    big = [(h, k) for h, k in options if host_total(h, k) >= spec.nproc]
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
    unit = units_word((k for _, k in options), spec.nproc)
    return (
        f"nnodes {spec.nnodes} needs {spec.nnodes} hosts with {spec.nproc} {unit} each; pool '{pool}' has "
        f"{len(big)}: lower nnodes to {max(len(big), 1)} (raise nproc or accumulation_steps to keep the global batch)"
    )
