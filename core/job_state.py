"""Job state machine: which transitions are legal. `core.jobs.transition` is the one function that makes them.

queued → starting → running → succeeded | failed | cancelled, with cancelling in between;
starting/running → queued when a worker hands a job back (graceful shutdown, restart).
Every transition is a conditional UPDATE (so two actors cannot both win) plus a timeline row.
"""

from __future__ import annotations

from core.tables import JobStatus

S = JobStatus
ALLOWED: dict[JobStatus, frozenset[JobStatus]] = {
    S.queued: frozenset({S.starting, S.cancelled, S.failed}),
    S.starting: frozenset({S.running, S.failed, S.cancelling, S.cancelled, S.queued, S.succeeded}),
    S.running: frozenset({S.succeeded, S.failed, S.cancelling, S.queued}),
    S.cancelling: frozenset({S.cancelled, S.failed, S.succeeded}),
    S.succeeded: frozenset(),
    S.failed: frozenset(),
    S.cancelled: frozenset(),
}


class IllegalTransition(ValueError):
    pass


# The states in which a worker supervises ranks (heartbeats, cancel, outcome).
LIVE = frozenset({S.starting, S.running, S.cancelling})
