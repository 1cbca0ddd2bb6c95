"""A job's own Slurm settings within its pool's bounds, pure: the spec's `slurm` block (time limit, partition) checked
against the pool's settings, and the pool's rendezvous port range. A job that asks for more than its pool allows
fails before Slurm sees it, its error naming the bound and the setting that sets it."""

from __future__ import annotations

from dataclasses import dataclass

from core.settings import Settings
from trainer.spec import SlurmSpec


class OutOfBounds(ValueError):
    """A job asks for a Slurm setting its pool does not allow (the message says what to change)."""


@dataclass(frozen=True)
class JobBounds:
    time_limit_min: int
    partition: str | None


def allowed_partitions(settings: Settings) -> list[str]:
    """The partitions a job may ask for: the pool's default first, then RANKZERO_SLURM_PARTITIONS."""
    listed = [p.strip() for p in settings.slurm_partitions.split(",") if p.strip()]
    default = [settings.slurm_partition] if settings.slurm_partition else []
    return list(dict.fromkeys(default + listed))


def max_time_limit_min(settings: Settings) -> int:
    return settings.slurm_max_time_limit_min or settings.slurm_time_limit_min


def job_bounds(asked: SlurmSpec | None, settings: Settings) -> JobBounds:
    """The time limit and partition a job is submitted with (OutOfBounds saying what to change)."""
    limit, partition = settings.slurm_time_limit_min, settings.slurm_partition
    if asked is not None and asked.time_limit_min is not None:
        most = max_time_limit_min(settings)
        if asked.time_limit_min > most:
            raise OutOfBounds(
                f"slurm.time_limit_min {asked.time_limit_min} exceeds pool {settings.slurm_pool}'s maximum of {most} "
                "minutes: ask for less (the pool's RANKZERO_SLURM_MAX_TIME_LIMIT_MIN sets it)"
            )
        if asked.time_limit_min * 60 <= settings.slurm_signal_margin_s + 60:
            raise OutOfBounds(
                f"slurm.time_limit_min {asked.time_limit_min} leaves no time to train before Slurm's warning "
                f"({settings.slurm_signal_margin_s} s, and up to 60 s more, before the limit): ask for more"
            )
        limit = asked.time_limit_min
    if asked is not None and asked.partition is not None:
        allowed = allowed_partitions(settings)
        if asked.partition not in allowed:
            names = ", ".join(allowed) or "none (the pool uses the cluster's default partition)"
            raise OutOfBounds(
                f"slurm.partition {asked.partition!r} is not one pool {settings.slurm_pool} allows: {names} "
                "(the pool's RANKZERO_SLURM_PARTITIONS lists them)"
            )
        partition = asked.partition
    return JobBounds(limit, partition)


def port_range(settings: Settings) -> tuple[int, int]:
    """(first port, how many) of the pool's rendezvous range ('20000-39999' → (20000, 20000))."""
    low, high = (int(x) for x in settings.slurm_port_range.split("-"))
    return low, high - low + 1
