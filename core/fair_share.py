"""Fair share (issue 23): how much each user has used lately, and the order it gives equal-priority jobs.
Pure: no database, no clock (callers pass `now`).

A user's usage U is the integral of the units her jobs hold (GPUs + CPU rank slots) over time, each
second's weight halving every half-life h (Slurm's decayed usage):

    U(t) = ∫ units(s) · 2^(-(t - s)/h) ds

It is kept incrementally, one row per user (usage, as_of, rate): over [as_of, now] with `rate` units
held, U(now) = U(as_of)·d + rate·τ·(1 - d), where d = 2^(-(now - as_of)/h) and τ = h / ln 2 (the mean
life). Among jobs of equal priority the scheduler picks first the owner with the smallest *share*

    S = U(now) + R·τ

where R is the units her jobs hold right now (counting those placed earlier in the same pass): R·τ is
what U tends to if she keeps holding R, so a user running 4 GPUs now weighs as much as one who held 4
for a long while, and two users with queued work interleave within a single pass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Account:
    """A user's usage row: `usage` unit-seconds decayed to `as_of`, `rate` units held since."""

    usage: float = 0.0
    as_of: float = 0.0
    rate: float = 0.0


def mean_life(half_life_s: float) -> float:
    return half_life_s / math.log(2)


def _decay(elapsed_s: float, half_life_s: float) -> float:
    return 2.0 ** (-max(elapsed_s, 0.0) / half_life_s)


def advance(account: Account, now: float, rate: float, half_life_s: float) -> Account:
    """The account at `now`: the old usage decayed plus the old rate's decayed integral; `rate` held from now."""
    if account.as_of <= 0:  # a new account: nothing to decay or charge yet
        return Account(0.0, now, rate)
    d = _decay(now - account.as_of, half_life_s)
    usage = account.usage * d + account.rate * mean_life(half_life_s) * (1.0 - d)
    return Account(usage, max(now, account.as_of), rate)


def usage_at(account: Account, now: float, half_life_s: float) -> float:
    """U(now): what `advance` would record, without writing it."""
    return advance(account, now, account.rate, half_life_s).usage


def share(usage_now: float, held_units: float, half_life_s: float) -> float:
    """S = U(now) + R·τ: smaller goes first among equal priority."""
    return usage_now + held_units * mean_life(half_life_s)
