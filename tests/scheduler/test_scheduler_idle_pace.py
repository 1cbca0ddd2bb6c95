"""How long the active scheduler sleeps between passes unless woken (worker/scheduler.py `next_pass_in`)."""

from __future__ import annotations

import pytest

from core.placement import Plan
from worker.scheduler import next_pass_in

QUIET = Plan()
WAITING = Plan(pending={7: "no host has 4 free CPU slots"})
PREEMPTING = Plan(preempt={3: 9})


@pytest.mark.parametrize(
    ("plan", "sweeping", "poll_s", "lease_s", "expected"),
    [
        (QUIET, False, 2.0, 10.0, 10.0 / 3),  # nothing queued: a third of the lease
        (WAITING, False, 2.0, 10.0, 2.0),  # a job waits for room: every poll, as ever
        (PREEMPTING, False, 2.0, 10.0, 2.0),
        (QUIET, True, 0.3, 10.0, 0.3),  # a sweep runs: its trials are judged for pruning every poll
        (QUIET, False, 5.0, 20.0, 20.0 / 3),
        (QUIET, False, 30.0, 120.0, 40.0),
        (QUIET, False, 10.0, 10.0, 10.0),  # never faster than the poll the operator set
    ],
)
def test_the_scheduler_sleeps_longer_only_when_nothing_is_queued_or_swept(
    plan, sweeping, poll_s, lease_s, expected
) -> None:
    assert next_pass_in(plan, poll_s, lease_s, sweeping) == pytest.approx(expected)


def test_an_idle_leader_still_renews_its_lease_in_time() -> None:
    from core.settings import Settings
    from worker.scheduler import Leadership

    for poll_s in (0.5, 2.0, 10.0, 60.0):
        lease_s = Leadership(Settings(scheduler_poll_s=poll_s)).lease_s  # pyright: ignore[reportCallIssue]
        assert next_pass_in(QUIET, poll_s, lease_s) < lease_s / 2
