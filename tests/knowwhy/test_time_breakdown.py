"""core/time_breakdown.py: every second of a job's timeline goes to exactly one part, table-driven."""

from __future__ import annotations

import pytest

from core.tables import JobStatus
from core.time_breakdown import PARTS, RunSpan, breakdown, stretches

S = JobStatus
Q, ST, R, C, OK, F, X = S.queued, S.starting, S.running, S.cancelling, S.succeeded, S.failed, S.cancelled

# (case, transitions (status, t) from created at 0, end, spans, expected parts (missing: 0))
CASES = [
    ("queued still", [(Q, 0)], 30, [], {"queued": 30}),
    ("cancelled while queued", [(Q, 0), (X, 12)], 99, [], {"queued": 12}),
    (
        "plain run, no points",
        [(Q, 0), (ST, 10), (R, 15), (OK, 115)],
        200,
        [None],
        {"queued": 10, "starting": 5, "training": 100},
    ),
    (
        # ranks up at 15, first point (step 10 at 1 s/step) at 35: 10 s of start-up, 10 of steps
        "start-up before the first step, checkpoints",
        [(Q, 0), (ST, 10), (R, 15), (OK, 115)],
        115,
        [RunSpan(first_time=35, first_step=10, last_time=115, last_step=90, checkpoint_s=4)],
        {"queued": 10, "starting": 15, "training": 86, "checkpointing": 4},
    ),
    (
        # attempt 1 reaches step 50 (checkpoint at 40) and is preempted; back in the queue 20 s;
        # attempt 2 (ranks up at 85) resumes at 40: 5 s of start-up, 10 steps redone (10 s), its first new
        # point (step 51) at 85 + 5 + 11
        "preempted and resumed: stopped and lost",
        [(Q, 0), (ST, 0), (R, 5), (Q, 60), (ST, 80), (R, 85), (OK, 135)],
        135,
        [
            RunSpan(first_time=6, first_step=1, last_time=55, last_step=50),
            RunSpan(first_time=101, first_step=51, last_time=135, last_step=85, steps_before=50, resumed_step=40),
        ],
        {"starting": 5 + 5 + 5, "training": 55 + 35, "lost_to_restarts": 10, "stopped": 20},
    ),
    (
        "lost never exceeds the time before the first new point",
        [(R, 0), (OK, 10)],
        10,
        [RunSpan(first_time=2, first_step=500, last_time=10, last_step=508, steps_before=499, resumed_step=0)],
        {"lost_to_restarts": 2, "training": 8},
    ),
    (
        "cancelling is stopped",
        [(Q, 0), (ST, 1), (R, 2), (C, 10), (X, 13)],
        50,
        [None],
        {"starting": 1, "queued": 1, "training": 8, "stopped": 3},
    ),
    ("a live job runs to now", [(Q, 0), (ST, 2), (R, 3)], 10, [], {"queued": 2, "starting": 1, "training": 7}),
    (
        "a transition before creation (clock skew) is clamped",
        [(Q, 0), (ST, -5), (R, 4), (F, 6)],
        6,
        [],
        {"starting": 4, "training": 2},
    ),
    (
        "a note repeats the status: no new stretch",
        [(Q, 0), (ST, 1), (R, 2), (R, 5), (OK, 8)],
        8,
        [None],
        {"queued": 1, "starting": 1, "training": 6},
    ),
]


@pytest.mark.parametrize(("transitions", "end", "spans", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_breakdown(transitions, end, spans, expected) -> None:
    got = breakdown(0.0, transitions, float(end), spans)
    want = {k: float(expected.get(k, 0)) for k in PARTS}
    assert got.parts == pytest.approx(want), got.parts
    assert sum(got.parts.values()) == pytest.approx(got.wall_s)


@pytest.mark.parametrize(("transitions", "end", "spans", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_parts_sum_to_the_timeline(transitions, end, spans, expected) -> None:
    timeline = stretches(0.0, transitions, float(end))
    wall = timeline[-1][2] - timeline[0][1] if timeline else 0.0
    assert breakdown(0.0, transitions, float(end), spans).wall_s == pytest.approx(wall)
    assert all(v >= 0 for v in breakdown(0.0, transitions, float(end), spans).parts.values())
