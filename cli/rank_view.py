"""`rankzero show`'s lines about a job's ranks (issue 38): the ranks a stall was blamed on with their Python
stacks, and the ranks slower than the median rank (GET /api/jobs/{id} `ranks`; api/models_ranks.py)."""

from __future__ import annotations

from typing import Any


def rank_lines(job: dict[str, Any]) -> list[str]:
    """Plain lines (the caller prints them verbatim): the stuck ranks and their stacks, then the stragglers."""
    view = job.get("ranks") or {}
    lines: list[str] = []
    stuck = view.get("stuck")
    if stuck:
        lines.append(f"stuck (attempt {stuck.get('attempt')}): {stuck.get('sentence')}")
        stacks: dict[str, str] = stuck.get("stacks") or {}
        for rank in stuck.get("ranks") or []:
            if str(rank) in stacks:
                lines.append(f"rank {rank}'s Python stacks when it was stopped (py-spy):")
                lines.append(stacks[str(rank)].rstrip())
            elif why := (stuck.get("unavailable") or {}).get(str(rank)):
                lines.append(f"rank {rank}: no stacks: {why}")
    lines += [f"slow: {line}" for line in view.get("stragglers") or []]
    return lines
