"""core/start_estimate.py: positions and start estimates from the jobs holding a pool, table-driven."""

from __future__ import annotations

import pytest

from core.start_estimate import Holder, Queued, estimate

H, Q = Holder, Queued

# (case, capacity, holders, queued in order, expected [(job, position, start_in_s or None, why contains)])
CASES = [
    ("free now", 4, [], [Q(10, 2, None)], [(10, 1, 0.0, "free now")]),
    ("behind a running job", 2, [H(1, 2, 40.0)], [Q(10, 2, None)], [(10, 1, 40.0, "job 1 ends")]),
    (
        "two ahead, each known",
        2,
        [H(1, 2, 40.0)],
        [Q(10, 2, 30.0), Q(11, 2, None)],
        [(10, 1, 40.0, "job 1"), (11, 2, 70.0, "job 10")],
    ),
    (
        "the earliest ends free enough",
        4,
        [H(1, 2, 100.0), H(2, 2, 10.0)],
        [Q(10, 2, None), Q(11, 2, None)],
        [(10, 1, 10.0, "job 2"), (11, 2, 100.0, "job 1")],
    ),
    (
        "an unknown end makes the rest unknown",
        2,
        [H(1, 2, None)],
        [Q(10, 1, None), Q(11, 1, 5.0)],
        [(10, 1, None, "job 1"), (11, 2, None, "job 1")],
    ),
    (
        "a job ahead with no known duration blocks the next",
        2,
        [],
        [Q(10, 2, None), Q(11, 1, None)],
        [(10, 1, 0.0, "free now"), (11, 2, None, "job 10")],
    ),
    (
        "never fits: said, and does not block",
        2,
        [],
        [Q(10, 3, None), Q(11, 2, None)],
        [(10, 1, None, "pool's 2 units"), (11, 2, 0.0, "free")],
    ),
    ("a finished ETA is now", 1, [H(1, 1, -3.0)], [Q(10, 1, None)], [(10, 1, 0.0, "job 1")]),
]


@pytest.mark.parametrize(
    ("capacity", "holders", "queued", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_estimate(capacity, holders, queued, expected) -> None:
    got = estimate(capacity, holders, queued)
    assert [(e.job_id, e.position, e.start_in_s) for e in got] == [(j, p, s) for j, p, s, _ in expected]
    for e, (_, _, _, words) in zip(got, expected, strict=True):
        assert words in e.why, e
