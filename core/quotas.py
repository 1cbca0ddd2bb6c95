"""Per-user quotas (issue 23): the limits a user's jobs live within. Pure.

Three limits, each per user (an admin sets them; else the settings' member default): GPUs held at
once, CPU rank slots held at once, and jobs queued at once. Admins (and the server token) have
none. A job past a running limit waits with the quota as its pending reason (core/placement.py); one
that could never fit its owner's quota, or one past the queued limit, is refused at submit.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainer.spec import JobSpec

UNLIMITED = 10**9
# A member's priority ceiling unless an admin sets hers (issue 34: a member's priority 1000 preempted
# everyone's and stepped over fair share). Admins have none: anything above a ceiling needs one.
DEFAULT_MAX_PRIORITY = 100


@dataclass(frozen=True)
class Quota:
    name: str  # the owner's name, for the reasons
    max_gpus: int = UNLIMITED
    max_slots: int = UNLIMITED
    max_queued: int = UNLIMITED


def for_user(
    name: str, role: str, limits: tuple[int | None, int | None, int | None], defaults: tuple[int, int, int]
) -> Quota:
    """The quota of a user: none for an admin; each limit her own when set, else the default."""
    if role == "admin":
        return Quota(name)
    gpus, slots, queued = (own if own is not None else default for own, default in zip(limits, defaults, strict=True))
    return Quota(name, gpus, slots, queued)


def least_units(spec: JobSpec) -> int:
    """The fewest units (GPUs or slots) the job takes anywhere: its smallest elastic size on every node.
    A 'dataparallel' job takes every GPU of a host, at least 2."""
    if spec.sync == "dataparallel":
        return 2
    return min(spec.elastic_sizes()) * spec.nnodes


def never_within(spec: JobSpec, quota: Quota, gpus: bool = True, slots: bool = True) -> str | None:
    """Why the job could never run within its owner's quota, or None. `gpus`, `slots`: whether its pool has hosts
    where it would take GPUs, slots (core/placement_types.py kinds_in_pool); only those kinds' quotas count.
    'auto' fits if either kind would."""
    need = least_units(spec)
    on_gpus = gpus and spec.device != "cpu"
    on_slots = slots and spec.device != "cuda" and spec.sync != "dataparallel"
    if (on_gpus and need <= quota.max_gpus) or (on_slots and need <= quota.max_slots):
        return None
    limits = [f"{quota.max_gpus} GPUs"] * on_gpus + [f"{quota.max_slots} CPU slots"] * on_slots
    units = "GPUs or slots" if on_gpus and on_slots else "GPUs" if on_gpus else "slots" if on_slots else "units"
    return (
        f"the job needs at least {need} {units} at once but {quota.name}'s quota is {' and '.join(limits) or 'none'}: "
        "lower nproc or nnodes, or ask an admin to raise the quota"
    )


def over_queued(queued_now: int, quota: Quota) -> str | None:
    """Why one more queued job is refused, or None."""
    if queued_now < quota.max_queued:
        return None
    return (
        f"{quota.name} has {queued_now} of {quota.max_queued} jobs queued (quota): wait for some to start, "
        "cancel some, or ask an admin to raise the quota"
    )


def ceiling_of(role: str, own: int | None) -> int | None:
    """A user's priority ceiling: none for an admin, else her own when set, else the default."""
    if role == "admin":
        return None
    return own if own is not None else DEFAULT_MAX_PRIORITY


def over_ceiling(name: str, priority: int, ceiling: int | None) -> str | None:
    """Why `priority` is refused for `name`, or None."""
    if ceiling is None or priority <= ceiling:
        return None
    return (
        f"priority {priority} is above {name}'s priority ceiling of {ceiling}: use {ceiling} or less, or ask an "
        "admin to raise the ceiling (`rankzero users set NAME --max-priority N`) or to set the priority"
    )


def held_reason(quota: Quota, kind_is_gpu: bool, held: int, need: int) -> str:
    """The pending reason of a job that would take its owner past her GPU or slot quota."""
    word, limit = ("GPUs", quota.max_gpus) if kind_is_gpu else ("CPU slots", quota.max_slots)
    return f"quota: {quota.name} uses {held} of {limit} {word}; this job needs {need} more"
