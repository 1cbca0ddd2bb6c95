"""core/rank_health.py: which rank is slow (straggler scores) and which is stuck, table-driven."""

from __future__ import annotations

import pytest

from core.rank_health import (
    RankSeen,
    Stuck,
    refine,
    straggler_line,
    straggler_scores,
    stragglers,
    stuck_ranks,
    time_per_step,
    waits_in_collective,
)

SCORES = [
    ("one rank: nothing to compare", {0: 1.0}, {}),
    ("equal ranks", {0: 0.2, 1: 0.2, 2: 0.2}, {0: 1.0, 1: 1.0, 2: 1.0}),
    ("rank 1 lags by 1.4", {0: 1.0, 1: 1.4, 2: 1.0}, {0: 1.0, 1: 1.4, 2: 1.0}),
    ("two ranks: the median is their mean", {0: 1.0, 1: 3.0}, {0: 0.5, 1: 1.5}),
    ("a zero median scores nothing", {0: 0.0, 1: 0.0, 2: 5.0}, {}),
]


@pytest.mark.parametrize(("times", "expected"), [c[1:] for c in SCORES], ids=[c[0] for c in SCORES])
def test_straggler_scores(times: dict[int, float], expected: dict[int, float]) -> None:
    assert straggler_scores(times) == pytest.approx(expected)


LAGGING = [
    ("none over the threshold", {0: 1.0, 1: 1.2}, []),
    ("one at the threshold", {0: 1.0, 1: 1.25, 2: 0.9}, [(1, 1.25)]),
    ("slowest first", {0: 1.3, 1: 2.0, 2: 1.0}, [(1, 2.0), (0, 1.3)]),
]


@pytest.mark.parametrize(("scores", "expected"), [c[1:] for c in LAGGING], ids=[c[0] for c in LAGGING])
def test_stragglers_over_the_threshold(scores: dict[int, float], expected: list[tuple[int, float]]) -> None:
    assert stragglers(scores) == expected


def test_straggler_line() -> None:
    assert straggler_line(1, 1.4) == "rank 1 is 1.4× slower than the median rank"


def r(rank: int, step: int | None = None, phase: str | None = None, step_s: float | None = None,
      work_s: float | None = None) -> RankSeen:  # fmt: skip
    return RankSeen(rank=rank, step=step, phase=phase, step_s=step_s, work_s=work_s)


TIMES = [
    ("own work where every rank marks it", [r(0, step_s=1, work_s=0.2), r(1, step_s=1, work_s=0.4)],
     ({0: 0.2, 1: 0.4}, "work")),
    ("wall step time where one does not", [r(0, step_s=1, work_s=0.2), r(1, step_s=1.1)], ({0: 1, 1: 1.1}, "step")),
    ("ranks with no time left out", [r(0, step_s=1), r(1)], ({0: 1}, "step")),
]  # fmt: skip


@pytest.mark.parametrize(("ranks", "expected"), [c[1:] for c in TIMES], ids=[c[0] for c in TIMES])
def test_time_per_step(ranks: list[RankSeen], expected: tuple[dict[int, float], str]) -> None:
    assert time_per_step({x.rank: x for x in ranks}) == expected


STUCK = [
    ("no records", [], 2, Stuck((), "unknown")),
    ("rank 1 inside its work, rank 0 past it", [r(0, 5, "wait"), r(1, 5, "work")], 2, Stuck((1,), "work", (0,))),
    ("every rank inside its work: all", [r(0, 5, "work"), r(1, 5, "work")], 2, Stuck((0, 1), "all")),
    ("rank 2 behind", [r(0, 7), r(1, 7), r(2, 6)], 3, Stuck((2,), "behind", (0, 1))),
    ("a rank with no step yet is behind", [r(0, 3), r(1)], 2, Stuck((1,), "behind", (0,))),
    ("same step, no phases: all", [r(0, 5), r(1, 5)], 2, Stuck((0, 1), "all")),
    ("a rank with no record is among all", [r(0, 5)], 2, Stuck((0, 1), "all")),
]


@pytest.mark.parametrize(("ranks", "world", "expected"), [c[1:] for c in STUCK], ids=[c[0] for c in STUCK])
def test_stuck_ranks(ranks: list[RankSeen], world: int, expected: Stuck) -> None:
    assert stuck_ranks({x.rank: x for x in ranks}, world) == expected


WAITING = """Thread 101 (idle): "MainThread"
    all_reduce (torch/distributed/distributed_c10d.py:2801)
    wrapper (torch/distributed/c10d_logger.py:81)
    <module> (train.py:20)
"""
SLEEPING = """Thread 102 (idle): "MainThread"
    sleep_forever (train.py:9)
    <module> (train.py:18)
Thread 103 (idle): "rank-progress"
    wait (threading.py:359)
    _loop (trainer/rank_progress.py:150)
"""
IN_BACKWARD = """Thread 104 (active): "MainThread"
    _engine_run_backward (torch/autograd/graph.py:841)
    backward (torch/autograd/__init__.py:364)
"""


JOINING = """Thread 106 (idle): "MainThread"
    _create_c10d_store (torch/distributed/rendezvous.py:189)
    _env_rendezvous_handler (torch/distributed/rendezvous.py:272)
    init_process_group (torch/distributed/distributed_c10d.py:1694)
    wrapper (torch/distributed/c10d_logger.py:81)
    <module> (train.py:5)
"""
MESHING = """Thread 107 (active): "MainThread"
    _new_process_group_helper (torch/distributed/distributed_c10d.py:2012)
    init_process_group (torch/distributed/distributed_c10d.py:1731)
    wrapper (torch/distributed/c10d_logger.py:81)
"""
IMPORTING = """Thread 108 (active): "MainThread"
    <module> (torch/distributed/fsdp/__init__.py:1)
    _call_with_frames_removed (<frozen importlib._bootstrap>:241)
    _find_and_load (<frozen importlib._bootstrap>:1176)
    <module> (train.py:2)
"""


IN_OWN_CODE = """Thread 109 (active): "MainThread"
    slow_mlp (tests/support/slow_model.py:79)
    build_model (trainer/models.py:86)
    train (trainer/train.py:81)
    main (trainer/__main__.py:43)
    wrapper (torch/distributed/elastic/multiprocessing/errors/__init__.py:380)
    <module> (trainer/__main__.py:66)
"""


@pytest.mark.parametrize("stack", [JOINING, MESHING, IMPORTING, IN_OWN_CODE],
                         ids=["rendezvous", "process group", "import", "own code, @record"])  # fmt: skip
def test_a_rank_starting_or_in_its_own_code_is_not_in_a_collective(stack: str) -> None:
    """CI: a start-up timeout said both ranks 'all wait in a collective that never completes': every built-in
    rank's stack ends in torchrun's @record wrapper (torch/distributed/elastic/), read as a collective; and a
    rank in init_process_group is starting. The note of a start-up that never ended names no rank."""
    assert not waits_in_collective(stack)
    assert refine(Stuck((), "unknown"), {0: stack, 1: stack}) == Stuck((), "unknown")


def test_a_collective_is_read_from_the_main_thread_only() -> None:
    assert waits_in_collective(WAITING) and waits_in_collective(IN_BACKWARD)
    assert not waits_in_collective(SLEEPING)
    other_thread_waits = SLEEPING + 'Thread 105 (idle): "gloo"\n    all_reduce (torch/distributed/x.py:1)\n'
    assert not waits_in_collective(other_thread_waits)


REFINED = [
    ("the sleeper among waiters", Stuck((0, 1), "all"), {0: WAITING, 1: SLEEPING}, Stuck((1,), "stacks", (0,))),
    ("all wait: a collective that never completes", Stuck((0, 1), "all"), {0: WAITING, 1: IN_BACKWARD},
     Stuck((0, 1), "collective")),
    ("none waits: all stand", Stuck((0, 1), "all"), {0: SLEEPING, 1: SLEEPING}, Stuck((0, 1), "all")),
    ("rules 1 and 2 stand", Stuck((1,), "behind", (0,)), {1: WAITING}, Stuck((1,), "behind", (0,))),
    ("no stacks: as it was", Stuck((0, 1), "all"), {}, Stuck((0, 1), "all")),
]  # fmt: skip


@pytest.mark.parametrize(("stuck", "stacks", "expected"), [c[1:] for c in REFINED], ids=[c[0] for c in REFINED])
def test_refine_with_stacks(stuck: Stuck, stacks: dict[int, str], expected: Stuck) -> None:
    assert refine(stuck, stacks) == expected


NO_RECORDS = "a rank hung (no rank reported its progress: the job calls no rankzero.progress on its ranks)"
SENTENCES = [
    (Stuck((1,), "stacks", (0,)), "rank 1 hung (last step done: 5); rank 0 waited for it"),
    (Stuck((1,), "work", (0,)), "rank 1 hung inside its own work (last step done: 5); rank 0 waited for it"),
    (Stuck((0, 1), "collective"), "ranks 0, 1 all wait in a collective that never completes (last step done: 5)"),
    (Stuck((), "unknown"), NO_RECORDS),
]  # fmt: skip


@pytest.mark.parametrize(("stuck", "expected"), SENTENCES, ids=[s[0].how for s in SENTENCES])
def test_the_stall_sentence_names_the_ranks(stuck: Stuck, expected: str) -> None:
    assert stuck.sentence({0: r(0, 5), 1: r(1, 5)}) == expected
