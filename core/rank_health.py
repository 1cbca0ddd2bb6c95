"""Which rank is stuck, which rank is slow (issue 38): pure decisions over every rank's progress record
(trainer/rank_progress.py) and, for a stall, the ranks' Python stacks (worker/rank_stacks.py takes them).

Slow: a rank's straggler score is its median time per step over the median rank's. Its own work time
(`work_s`: what `rankzero.rank_work` or the built-in trainer marks) where every rank reports one, else
its wall step time (`step_s`). Under collectives the wall times are all the slowest rank's, so a job
that marks no work shows no straggler rather than a wrong one.

Stuck: when the stall watchdog fires (worker/stop_reason.py), the rank(s) to blame, first rule that holds:
1. some ranks are inside their own work while the others are past it (waiting in the sync): the former;
2. some ranks finished fewer steps than the others: those behind;
3. otherwise every rank stopped at the same point. Then the stacks decide: the ranks not waiting in a
   collective while others are; if all wait in one, all are named (a collective that never completes).
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

STRAGGLER_THRESHOLD = 1.25  # a rank this much slower than the median rank is named on the page
# Frames of a rank that waits for its peers (py-spy's "name (file:line)" lines): torch.distributed's
# collectives, DDP's own syncs, and autograd's engine (DDP all-reduces gradients inside backward).
COLLECTIVE_FRAMES = ("torch/distributed/", "torch/nn/parallel/distributed.py", "torch/autograd/graph.py")
# A rank still starting: joining its peers (init_process_group, its rendezvous) or importing (torch.distributed's
# own modules among them). Its wait is a start-up's, not a collective's that never completes.
STARTING_FRAMES = ("init_process_group (", "torch/distributed/rendezvous.py", "<frozen importlib._bootstrap")


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class RankSeen:
    """One rank's record as read (every field optional but the rank)."""

    rank: int
    step: int | None = None
    progress_at: float | None = None
    phase: str | None = None
    phase_at: float | None = None
    step_s: float | None = None
    work_s: float | None = None
    pid: int | None = None
    attempt: int | None = None

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> RankSeen:
        step, pid, attempt = record.get("step"), record.get("pid"), record.get("attempt")
        phase = record.get("phase")
        return cls(
            rank=int(record["rank"]),
            step=step if isinstance(step, int) and not isinstance(step, bool) else None,
            progress_at=_number(record.get("progress_at")),
            phase=phase if phase in ("work", "wait") else None,
            phase_at=_number(record.get("phase_at")),
            step_s=_number(record.get("step_s")),
            work_s=_number(record.get("work_s")),
            pid=pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
            attempt=attempt if isinstance(attempt, int) and not isinstance(attempt, bool) else None,
        )

    def public(self) -> dict[str, Any]:
        """What the job row keeps and the API serves (no pid: it is the sandbox's, meaningless outside)."""
        return {
            "rank": self.rank,
            "step": self.step,
            "progress_at": self.progress_at,
            "phase": self.phase,
            "phase_at": self.phase_at,
            "step_s": self.step_s,
            "work_s": self.work_s,
        }


# --- slow ---------------------------------------------------------------------------------------------


def time_per_step(ranks: Mapping[int, RankSeen]) -> tuple[dict[int, float], str]:
    """Rank → its median time per step, and which time that is ("work" or "step"): own work where every
    rank that reports a time reports one, else wall step time."""
    timed = [r for r in ranks.values() if r.step_s is not None or r.work_s is not None]
    if timed and all(r.work_s is not None for r in timed):
        return {r.rank: r.work_s for r in timed if r.work_s is not None}, "work"
    return {r.rank: r.step_s for r in timed if r.step_s is not None}, "step"


def straggler_scores(times: Mapping[int, float]) -> dict[int, float]:
    """Rank → its time over the median rank's time ({} with fewer than two ranks or no positive median)."""
    if len(times) < 2:
        return {}
    middle = statistics.median(times.values())
    if middle <= 0:
        return {}
    return {rank: t / middle for rank, t in sorted(times.items())}


def stragglers(scores: Mapping[int, float], threshold: float = STRAGGLER_THRESHOLD) -> list[tuple[int, float]]:
    """The ranks slower than `threshold` × the median rank, slowest first."""
    slow = [(rank, score) for rank, score in scores.items() if score >= threshold]
    return sorted(slow, key=lambda rs: (-rs[1], rs[0]))


def straggler_line(rank: int, score: float) -> str:
    return f"rank {rank} is {score:.1f}× slower than the median rank"


# --- stuck --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stuck:
    """The ranks blamed for a stall, and why (`how`: work, behind, stacks, collective, all, unknown)."""

    ranks: tuple[int, ...]
    how: str
    waiting: tuple[int, ...] = ()

    def sentence(self, ranks: Mapping[int, RankSeen]) -> str:
        """The words the stall's note and the job page carry: which rank(s) hung, and where."""
        if not self.ranks:
            return "a rank hung (no rank reported its progress: the job calls no rankzero.progress on its ranks)"
        named = _names(self.ranks)
        where = _last_steps(self.ranks, ranks)
        if self.how == "collective":
            return f"{named} all wait in a collective that never completes{where}"
        if self.how == "all":
            return f"{named} all stopped at the same point{where}"
        them = "it" if len(self.ranks) == 1 else "them"
        others = f"; {_names(self.waiting)} waited for {them}" if self.waiting else ""
        inside = " inside its own work" if self.how == "work" else ""
        return f"{named} hung{inside}{where}{others}"


def _names(ranks: tuple[int, ...]) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return "ranks " + ", ".join(str(r) for r in ranks)


def _last_steps(named: tuple[int, ...], ranks: Mapping[int, RankSeen]) -> str:
    steps = {ranks[r].step for r in named if r in ranks and ranks[r].step is not None}
    if len(steps) == 1:
        return f" (last step done: {steps.pop()})"
    return ""


def stuck_ranks(ranks: Mapping[int, RankSeen], world_size: int) -> Stuck:
    """The rank(s) to blame from the records alone (rules 1 and 2); `how` "unknown" or "all" when the
    records cannot tell (rule 3: the stacks decide, `refine`)."""
    everyone = tuple(range(max(world_size, max(ranks, default=-1) + 1)))
    if not ranks:
        return Stuck((), "unknown")
    phases = {r.rank: r.phase for r in ranks.values()}
    working = tuple(r for r in everyone if phases.get(r) == "work")
    if working and any(p == "wait" for p in phases.values()):
        return Stuck(working, "work", tuple(r for r in everyone if r not in working and r in ranks))
    steps = {r.rank: r.step if r.step is not None else -1 for r in ranks.values()}
    top = max(steps.values())
    behind = tuple(r for r in everyone if r in steps and steps[r] < top)
    if behind:
        return Stuck(behind, "behind", tuple(r for r in everyone if r not in behind and r in ranks))
    return Stuck(everyone, "all")


def waits_in_collective(stack: str) -> bool:
    """Does a py-spy dump show its main thread waiting for peers (a collective, DDP's backward sync)? Not while
    it is still starting (STARTING_FRAMES)."""
    main = [line.strip() for line in _main_thread(stack) if line.strip()]
    if any(frame in line for line in main for frame in STARTING_FRAMES):
        return False
    # Only the innermost frames, torch's own, say where it waits: torchrun's @record wrapper
    # (torch/distributed/elastic/...) sits at the bottom of every built-in rank's stack, whatever it does.
    waits_in = itertools.takewhile(lambda line: "torch/" in line, main)
    return any(frame in line for line in waits_in for frame in COLLECTIVE_FRAMES)


def _main_thread(stack: str) -> list[str]:
    """The lines of the dump's main thread (py-spy: `Thread 0x... (idle): "MainThread"` heads each thread)."""
    lines = stack.splitlines()
    heads = [i for i, line in enumerate(lines) if line.startswith("Thread ")]
    main = next((i for i in heads if '"MainThread"' in lines[i]), heads[0] if heads else None)
    if main is None:
        return lines
    end = next((i for i in heads if i > main), len(lines))
    return lines[main + 1 : end]


def refine(stuck: Stuck, stacks: Mapping[int, str]) -> Stuck:
    """Rule 3 with the stacks: of the ranks named by "all", those not waiting in a collective while others
    do; all of them ("collective") when every dumped one waits in one. Rules 1 and 2 stand as they are."""
    if stuck.how not in ("all", "unknown") or not stacks:
        return stuck
    dumped = [r for r in stuck.ranks if r in stacks] if stuck.ranks else sorted(stacks)
    waiting = tuple(r for r in dumped if waits_in_collective(stacks[r]))
    outside = tuple(r for r in dumped if r not in waiting)
    if waiting and outside:
        return Stuck(outside, "stacks", waiting)
    if waiting:
        return Stuck(tuple(dumped), "collective")
    return stuck
