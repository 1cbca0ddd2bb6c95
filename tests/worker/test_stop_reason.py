"""worker/stop_reason.py: when node 0 or a follower stops its ranks, one small case per rule (pure, no I/O)."""

from __future__ import annotations

import pytest

from core.tables import JobStatus
from worker.attempt import Limits, Seen, StopReason
from worker.stop_reason import grace_s, stall_limit, stall_note, stop_note, stop_reason

S = JobStatus
R = StopReason
NODE_ZERO = Limits(attempt=2, stall_timeout_s=60.0, startup_timeout_s=300.0)
FOLLOWER = Limits(attempt=2)


def seen(status: JobStatus | None = S.running, attempt: int = 2, **fields: object) -> Seen:
    return Seen(status=status, attempt=attempt, **fields)  # type: ignore[arg-type]


CASES = [
    # (case, seen, limits, expected)
    ("running, quiet for a moment: keep going", seen(started=True, quiet_s=10), NODE_ZERO, None),
    ("starting: keep going", seen(S.starting), NODE_ZERO, None),
    ("a later attempt owns the row", seen(attempt=3), NODE_ZERO, R.replaced),
    ("replaced wins over cancelling", seen(S.cancelling, attempt=3), NODE_ZERO, R.replaced),
    ("a gone row has no attempt to compare", seen(None, attempt=0), NODE_ZERO, R.gone),
    ("cancelling", seen(S.cancelling), NODE_ZERO, R.cancel),
    ("cancel wins over drain and memory", seen(S.cancelling, draining=True, over_limit="x"), NODE_ZERO, R.cancel),
    ("this worker drains", seen(draining=True), NODE_ZERO, R.drain),
    ("drain wins over memory", seen(draining=True, over_limit="x"), NODE_ZERO, R.drain),
    ("over the memory limit", seen(over_limit="uses 2 GB"), NODE_ZERO, R.memory),
    ("memory wins over preemption", seen(over_limit="x", preempt_for=7), NODE_ZERO, R.memory),
    ("preempted while running", seen(preempt_for=7), NODE_ZERO, R.preempt),
    ("preempted while starting", seen(S.starting, preempt_for=7), NODE_ZERO, R.preempt),
    ("a preempt mark on a finished row: gone", seen(S.succeeded, preempt_for=7), NODE_ZERO, R.gone),
    ("preemption wins over a lost peer", seen(preempt_for=7, lost_peer="h2"), NODE_ZERO, R.preempt),
    ("a peer's host went silent", seen(lost_peer="h2"), NODE_ZERO, R.host_lost),
    ("a lost peer wins over a stall", seen(lost_peer="h2", started=True, quiet_s=999), NODE_ZERO, R.host_lost),
    ("quiet past stall_timeout_s after starting", seen(started=True, quiet_s=61), NODE_ZERO, R.stall),
    ("quiet exactly the limit: not yet", seen(started=True, quiet_s=60), NODE_ZERO, None),
    ("slow start within startup_timeout_s", seen(started=False, quiet_s=200), NODE_ZERO, None),
    ("start-up past startup_timeout_s", seen(started=False, quiet_s=301), NODE_ZERO, R.stall),
    ("no watchdog without stall_timeout_s", seen(started=True, quiet_s=1e9), Limits(2, None, 300.0), None),
    ("stall wins over a finished row", seen(S.succeeded, started=True, quiet_s=61), NODE_ZERO, R.stall),
    ("finished, tearing down: keep waiting", seen(started=True, quiet_s=999, finished_s=30), NODE_ZERO, None),
    ("finished, teardown past linger_s", seen(started=True, finished_s=61), NODE_ZERO, R.lingered),
    ("finished exactly linger_s ago: not yet", seen(started=True, finished_s=60), NODE_ZERO, None),
    ("a cancel wins over lingering", seen(S.cancelling, finished_s=999), NODE_ZERO, R.cancel),
    ("a lost peer wins over lingering", seen(lost_peer="h2", finished_s=999), NODE_ZERO, R.host_lost),
    ("finished under us", seen(S.succeeded), NODE_ZERO, R.gone),
    ("failed under us", seen(S.failed), NODE_ZERO, R.gone),
    ("cancelled under us", seen(S.cancelled), NODE_ZERO, R.gone),
    ("sent back to the queue under us", seen(S.queued), NODE_ZERO, R.gone),
    ("row deleted", seen(None, attempt=0), NODE_ZERO, R.gone),
    # a follower watches the row and its own drain only
    ("follower: running", seen(), FOLLOWER, None),
    ("follower: never a stall", seen(started=False, quiet_s=1e9), FOLLOWER, None),
    ("follower: another attempt", seen(attempt=5), FOLLOWER, R.replaced),
    ("follower: cancelling", seen(S.cancelling), FOLLOWER, R.cancel),
    ("follower: its worker drains", seen(draining=True), FOLLOWER, R.drain),
    ("follower: preempted", seen(preempt_for=3), FOLLOWER, R.preempt),
    ("follower: node 0 requeued the job", seen(S.queued), FOLLOWER, R.gone),
    ("follower: row gone", seen(None, attempt=0), FOLLOWER, R.gone),
]


@pytest.mark.parametrize(("case", "what", "limits", "expected"), CASES, ids=[c[0] for c in CASES])
def test_stop_reason(case: str, what: Seen, limits: Limits, expected: StopReason | None) -> None:
    assert stop_reason(what, limits) is expected


def test_the_stall_limit_is_startup_timeout_until_the_first_sign_of_life() -> None:
    assert stall_limit(seen(started=False), NODE_ZERO) == 300.0
    assert stall_limit(seen(started=True), NODE_ZERO) == 60.0
    assert stall_limit(seen(started=False), Limits(2, None, 300.0)) is None


def test_the_stall_note_says_which_phase_and_limit() -> None:
    assert stall_note(seen(started=False), NODE_ZERO).startswith("no sign of start-up within 300 s of launch")
    note = stall_note(seen(started=True, last_step=41), NODE_ZERO)
    assert note.startswith("no sign of life for 60 s after step 41 (stall_timeout_s")
    assert "after step" not in stall_note(seen(started=True), NODE_ZERO)


def test_the_stop_note_names_what_was_broken() -> None:
    assert stop_note(R.memory, seen(over_limit="uses 3 GB of 2 GB"), NODE_ZERO) == "uses 3 GB of 2 GB"
    assert stop_note(R.host_lost, seen(lost_peer="h2"), NODE_ZERO) == "h2"
    assert stop_note(R.stall, seen(started=True), NODE_ZERO).startswith("no sign of life for 60 s")
    assert stop_note(R.cancel, seen(), NODE_ZERO) == ""


def test_a_hung_rank_gets_at_most_five_seconds_to_checkpoint() -> None:
    assert grace_s(30.0, R.stall) == 5.0
    assert grace_s(2.0, R.stall) == 2.0
    assert grace_s(30.0, R.cancel) == 30.0


def test_a_lingering_teardown_is_stopped_quickly_and_says_so() -> None:
    assert grace_s(30.0, R.lingered) == 5.0
    note = stop_note(R.lingered, seen(finished_s=61), NODE_ZERO)
    assert note == "its processes had not exited 60 s after the trainer finished; they were stopped"
