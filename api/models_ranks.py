"""REST shape of a job's ranks (issue 38): every rank's last progress and time per step, the straggler
lines, and the last stall's account (the ranks it blamed, their Python stacks). Built from the job row's
`rank_progress` and `stuck_ranks` (worker/rank_watch.py writes them; core/rank_health.py decides)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from pydantic import BaseModel, Field

from core import rank_health
from core.rank_health import RankSeen
from core.tables import Job


def _at(value: object) -> datetime | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return datetime.fromtimestamp(float(value), tz=timezone.utc)
    return None


class RankPublic(BaseModel):
    rank: int
    step: int | None = Field(None, description="The last step this rank finished.")
    progress_at: datetime | None = Field(None, description="When it finished it.")
    phase: str | None = Field(None, description="'work' (its own part of a step) or 'wait' (past it); null: unmarked.")
    step_s: float | None = Field(None, description="Median wall seconds per step over its last 50 steps.")
    work_s: float | None = Field(None, description="Median seconds of its own work per step (rankzero.rank_work).")
    score: float | None = Field(None, description="Its time per step over the median rank's (straggler score).")


class StuckRanks(BaseModel):
    attempt: int
    at: datetime | None
    ranks: list[int] = Field(description="The ranks the stall is blamed on.")
    waiting: list[int] = Field(description="The ranks that waited for them.")
    how: str = Field(description="work, behind, stacks, collective, all or unknown (core/rank_health.py).")
    sentence: str
    stacks: dict[str, str] = Field(description="Rank → its Python stacks (py-spy dump), taken before it was stopped.")
    unavailable: dict[str, str] = Field(description="Rank → why its stacks could not be taken.")


class RanksView(BaseModel):
    attempt: int | None = Field(None, description="The attempt the progress was read from.")
    ranks: list[RankPublic]
    timed_by: str = Field(description="'work' (own work per step) or 'step' (wall time per step) for the scores.")
    stragglers: list[str] = Field(description="e.g. 'rank 3 is 1.4× slower than the median rank'.")
    stuck: StuckRanks | None = None

    @classmethod
    def of(cls, job: Job) -> RanksView | None:
        progress: dict[str, Any] = job.rank_progress or {}
        stuck_row: dict[str, Any] | None = job.stuck_ranks
        seen: dict[int, RankSeen] = {}
        for record in progress.get("ranks") or []:
            if isinstance(record, dict) and isinstance(record.get("rank"), int):
                one = RankSeen.of(record)
                seen[one.rank] = one
        if not seen and not stuck_row:
            return None
        times, timed_by = rank_health.time_per_step(seen)
        scores = rank_health.straggler_scores(times)
        ranks = [
            RankPublic(
                rank=r.rank, step=r.step, progress_at=_at(r.progress_at), phase=r.phase, step_s=r.step_s,
                work_s=r.work_s, score=scores.get(r.rank),
            )
            for r in sorted(seen.values(), key=lambda r: r.rank)
        ]  # fmt: skip
        lines = [rank_health.straggler_line(rank, score) for rank, score in rank_health.stragglers(scores)]
        attempt = progress.get("attempt")
        return cls(
            attempt=attempt if isinstance(attempt, int) else None,
            ranks=ranks,
            timed_by=timed_by,
            stragglers=lines,
            stuck=_stuck(stuck_row),
        )


def _stuck(row: dict[str, Any] | None) -> StuckRanks | None:
    if not row:
        return None
    return StuckRanks(
        attempt=int(row.get("attempt") or 0),
        at=_at(row.get("at")),
        ranks=[r for r in row.get("ranks") or [] if isinstance(r, int)],
        waiting=[r for r in row.get("waiting") or [] if isinstance(r, int)],
        how=str(row.get("how") or "unknown"),
        sentence=str(row.get("sentence") or ""),
        stacks={str(k): str(v) for k, v in (row.get("stacks") or {}).items()},
        unavailable={str(k): str(v) for k, v in (row.get("unavailable") or {}).items()},
    )
