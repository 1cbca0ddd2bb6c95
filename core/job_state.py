"""Job state machine: which transitions are legal, and the named sets of states everyone else uses.

`core.jobs.transition` is the one function that makes transitions. The sets below are the one home of
"which states are live / finished / hold capacity / can be cancelled": the API, the worker, the
scheduler and the CLI import them, and the web reads them from GET /api/meta (`published_sets`).

queued → starting → running → succeeded | failed | cancelled, with cancelling in between;
starting/running → queued when a worker hands a job back (graceful shutdown, restart).
Every transition is a conditional UPDATE (so two actors cannot both win) plus a timeline row.
"""

from __future__ import annotations

from core.tables import TERMINAL_STATUSES, JobStatus

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


# Every state, in the order a job goes through them (filters and legends list them so).
ORDER: tuple[JobStatus, ...] = tuple(JobStatus)
# Finished: nothing changes any more (no worker, no placement).
TERMINAL: frozenset[JobStatus] = TERMINAL_STATUSES
# The states in which a worker supervises ranks (heartbeats, cancel, outcome).
LIVE = frozenset({S.starting, S.running, S.cancelling})
# The states in which a job holds (or is placed on) capacity: the scheduler and GET /api/hosts count them.
HOLDING = frozenset({S.queued}) | LIVE
# The states POST /api/jobs/{id}/cancel acts on (queued → cancelled, starting/running → cancelling).
CANCELLABLE = frozenset({S.queued, S.starting, S.running})


def published_sets() -> dict[str, list[str]]:
    """The sets as clients see them (GET /api/meta, the CLI): state names, each set in ORDER."""
    named = {
        "all": frozenset(ORDER),
        "terminal": TERMINAL,
        "live": LIVE,
        "holding": HOLDING,
        "cancellable": CANCELLABLE,
    }
    return {name: [s.value for s in ORDER if s in members] for name, members in named.items()}
