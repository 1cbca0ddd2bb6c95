"""Whether the ranks of an attempt must be stopped now, and why: one pure rule for node 0 and followers.

The watcher (worker/watch.py for node 0, worker/follower.py) looks and returns a `Seen`; this decides.
"""

from __future__ import annotations

from core.tables import JobStatus
from worker.attempt import Limits, Seen, StopReason

S = JobStatus


def stall_limit(seen: Seen, limits: Limits) -> float | None:
    """Seconds without a sign of life that count as a stall; until the first one, startup_timeout_s (a
    slow start is no stall). None: no watchdog."""
    if seen.started or limits.stall_timeout_s is None:
        return limits.stall_timeout_s
    return limits.startup_timeout_s


def stop_reason(seen: Seen, limits: Limits) -> StopReason | None:
    """Why the ranks must stop now (None: let them run). The first rule that holds wins."""
    status = seen.status
    if status is not None and seen.attempt != limits.attempt:
        return StopReason.replaced
    if status == S.cancelling:
        return StopReason.cancel
    if seen.draining:
        return StopReason.drain
    if seen.over_limit is not None:
        return StopReason.memory
    if seen.broke_limit is not None:  # max_runtime_s, disk_limit_mb, an overlong event line (worker/quota.py)
        return StopReason.limit
    if seen.preempt_for is not None and status in (S.starting, S.running):
        return StopReason.preempt
    if seen.lost_peer is not None:
        return StopReason.host_lost
    hung = _hung(seen, limits)
    if hung is not None:
        return hung
    if status not in (S.starting, S.running):  # deleted, finished, or sent back to the queue
        return StopReason.gone
    return None


def _hung(seen: Seen, limits: Limits) -> StopReason | None:
    """A stall (no sign of life for too long), or a teardown that lingers after the trainer's `finished` (all
    is on disk then: quiet ranks are no stall, but they may hang in teardown or torchrun's exit barrier)."""
    if seen.finished_s is not None:
        return StopReason.lingered if seen.finished_s > limits.linger_s else None
    limit = stall_limit(seen, limits)
    return StopReason.stall if limit is not None and seen.quiet_s > limit else None


def stall_note(seen: Seen, limits: Limits) -> str:
    """What the watchdog saw, with the limit that applied: a start-up that never ended, or life that stopped."""
    limit = stall_limit(seen, limits) or 0.0
    if not seen.started:
        return (
            f"no sign of start-up within {limit:g} s of launch (startup_timeout_s): the ranks never began "
            "training (stuck importing, loading data or in rendezvous)"
        )
    after = f" after step {seen.last_step}" if seen.last_step is not None else ""
    return f"no sign of life for {limit:g} s{after} (stall_timeout_s; no step, event or output): a rank hung"


def stop_note(reason: StopReason, seen: Seen, limits: Limits) -> str:
    """The words `Ended.note` carries for a stop: the stall seen, the limit broken, the silent host."""
    if reason is StopReason.stall:
        return stall_note(seen, limits)
    if reason is StopReason.memory:
        return seen.over_limit or ""
    if reason is StopReason.limit:
        return seen.broke_limit or ""
    if reason is StopReason.lingered:
        return f"its processes had not exited {limits.linger_s:g} s after the trainer finished; they were stopped"
    return seen.lost_peer or ""


def grace_s(cancel_grace_s: float, reason: StopReason) -> float:
    """How long the ranks get to checkpoint after SIGTERM (a hung rank will not, a finished one need not: 5 s)."""
    return min(cancel_grace_s, 5.0) if reason in (StopReason.stall, StopReason.lingered) else cancel_grace_s
