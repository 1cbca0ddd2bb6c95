"""The scheduler's side of quotas and fair share (issue 23): read each user's quota and decayed usage for
a pass, and charge what her jobs hold afterwards. The decisions are core/placement.py's (pure); the
arithmetic core/fair_share.py's.

Cheap by design: one row per user (`user_usage`: usage, as_of, rate) read per pass, and written only
for users whose jobs hold something now or did at the last pass. Each write charges the interval
since the last one at the rate then held (placements of that pass included, so a job that starts
and ends between two passes is still charged), never a scan of the jobs' history.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from core import fair_share, placement, quotas
from core.settings import Settings
from core.tables import User, UserUsage


def defaults(settings: Settings) -> tuple[int, int, int]:
    return (settings.quota_gpus, settings.quota_cpu_slots, settings.quota_queued)


def quota_of(user: User, settings: Settings) -> quotas.Quota:
    return quotas.for_user(
        user.name, user.role, (user.max_gpus, user.max_cpu_slots, user.max_queued), defaults(settings)
    )


def read(engine: Engine, settings: Settings, now: float) -> placement.Team:
    """Every user's quota (admins: none) and usage now."""
    half_life = settings.fair_share_half_life_s
    with Session(engine) as s:
        members = {u.id: quota_of(u, settings) for u in s.exec(select(User)).all() if u.id is not None}
        rows = s.exec(select(UserUsage)).all()
    usage = {r.user_id: fair_share.usage_at(_account(r), now, half_life) for r in rows}
    limited = {uid: q for uid, q in members.items() if q != quotas.Quota(q.name)}
    return placement.Team(quotas=limited, usage=usage, half_life_s=half_life)


def _account(row: UserUsage) -> fair_share.Account:
    return fair_share.Account(row.usage, row.as_of, row.rate)


def held_after(
    usage: Sequence[placement.Usage], placements: Sequence[placement.Placement], waiting: Sequence[placement.Waiting]
) -> dict[int, float]:
    """Units (GPUs + slots) each owner's jobs hold once the pass's placements are made."""
    owners = {w.job_id: w.owner for w in waiting}
    held: dict[int, float] = {}
    uses = [(u.owner, u.nodes) for u in usage] + [(owners.get(p.job_id), p.nodes) for p in placements]
    for owner, nodes in uses:
        if owner is not None:
            held[owner] = held.get(owner, 0.0) + sum(len(n.gpus) + n.slots for n in nodes)
    return held


def charge(engine: Engine, settings: Settings, held: dict[int, float], now: float) -> None:
    """Advance the usage rows of users who hold something now or did at their last update."""
    half_life = settings.fair_share_half_life_s
    with Session(engine) as s:
        rows = {r.user_id: r for r in s.exec(select(UserUsage)).all()}
        known_users = set(s.exec(select(User.id)).all())
        for user_id in {*held, *(uid for uid, r in rows.items() if r.rate > 0)}:
            if user_id not in known_users:
                continue
            row = rows.get(user_id) or UserUsage(user_id=user_id)
            after = fair_share.advance(_account(row), now, held.get(user_id, 0.0), half_life)
            row.usage, row.as_of, row.rate = after.usage, after.as_of, after.rate
            s.add(row)
        s.commit()
