"""LossMeter folds its pending micro-batch losses only when read: the interval's mean loss and the
first non-finite step come out as a step-by-step running sum would give them, whenever it is read."""

from __future__ import annotations

import math

import pytest
import torch

from trainer.control import RunControl, StopSignal
from trainer.metrics import LossMeter

NAN, INF = math.nan, math.inf


def reference(losses: list[list[float]], samples: int) -> tuple[float, float]:
    """(mean loss, first bad step) the plain way: a running sum checked after every step."""
    total, first_bad = 0.0, INF
    for step, micro in enumerate(losses, start=1):
        total += sum(v * samples for v in micro)
        if not math.isfinite(total) and first_bad == INF:
            first_bad = step
    return total / (samples * sum(map(len, losses))), first_bad


CASES = [
    # (name, per-step micro-batch losses, steps after which the first bad step is read)
    ("finite, one micro-batch", [[1.0], [2.0], [3.0], [4.0]], [2]),
    ("finite, three micro-batches", [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], []),
    ("nan at step 3, read every step", [[1.0], [1.0], [NAN], [1.0], [1.0]], [1, 2, 3, 4]),
    ("nan at step 3, read once after", [[1.0], [1.0], [NAN], [1.0], [1.0]], []),
    ("inf in the last micro-batch of step 2", [[1.0, 1.0], [1.0, INF], [1.0, 1.0]], [1]),
    ("nan in the first micro-batch of step 4, reads around it", [[1.0] * 2] * 3 + [[NAN, 1.0]] + [[1.0] * 2], [3, 4]),
    ("two bad steps: the first wins", [[1.0], [INF], [NAN], [1.0]], [2]),
]


@pytest.mark.parametrize(("losses", "reads"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_folded_meter_gives_the_running_sums_answer(losses, reads):
    micro = len(losses[0])
    meter = LossMeter(torch.device("cpu"), micro)
    seen_bad = []
    for step, values in enumerate(losses, start=1):
        for v in values:
            meter.add(torch.tensor(v, dtype=torch.float32), 8)
        meter.end_step(step)
        if step in reads:
            seen_bad.append(meter.first_bad_step().item())
    want_mean, want_bad = reference(losses, 8)
    assert meter.first_bad_step().item() == want_bad
    for step, got in zip(reads, seen_bad, strict=True):  # an early read saw only the steps so far
        assert got == reference(losses[:step], 8)[1]
    mean = meter.reduce_mean(distributed=False)
    assert mean is not None
    if math.isfinite(want_mean):
        assert mean == pytest.approx(want_mean)
    else:
        assert not math.isfinite(mean)
    assert meter.reduce_mean(distributed=False) is None  # the interval was reset


def test_the_interval_resets_but_the_first_bad_step_stays():
    meter = LossMeter(torch.device("cpu"))
    for step, v in enumerate([1.0, NAN, 3.0], start=1):
        meter.add(torch.tensor(v), 4)
        meter.end_step(step)
    mean = meter.reduce_mean(distributed=False)
    assert mean is not None and not math.isfinite(mean)
    meter.add(torch.tensor(5.0), 4)
    meter.end_step(4)
    assert meter.reduce_mean(distributed=False) == 5.0
    assert meter.first_bad_step().item() == 2.0


def test_uneven_micro_batches_weigh_by_their_samples():
    meter = LossMeter(torch.device("cpu"), 2)
    meter.add(torch.tensor(1.0), 3)
    meter.add(torch.tensor(4.0), 1)
    meter.end_step(1)
    assert meter.reduce_mean(distributed=False) == pytest.approx((1.0 * 3 + 4.0 * 1) / 4)


def test_a_loss_kept_for_later_holds_no_graph():
    w = torch.ones(3, requires_grad=True)
    meter = LossMeter(torch.device("cpu"))
    meter.add((w * 2).sum(), 1)
    meter.end_step(1)
    assert all(not t.requires_grad and t.grad_fn is None for t in meter._pending)


def test_the_control_check_asks_for_the_bad_step_only_when_it_starts_one():
    asked = []

    def first_bad() -> torch.Tensor:
        asked.append(True)
        return torch.tensor(INF, dtype=torch.float64)

    control = RunControl(StopSignal(), rank=0, world_size=1, device=torch.device("cpu"), every=4)
    for step in range(1, 9):
        assert control.check(step, first_bad) is False
    assert len(asked) == 2  # steps 4 and 8
    control.settle(first_bad)
    assert len(asked) == 3


def test_a_non_finite_step_fails_the_check_that_reads_it():
    meter = LossMeter(torch.device("cpu"))
    control = RunControl(StopSignal(), rank=0, world_size=1, device=torch.device("cpu"), every=2)
    meter.add(torch.tensor(NAN), 1)
    meter.end_step(1)
    assert control.check(1, meter.first_bad_step) is False  # no check starts at step 1
    meter.add(torch.tensor(1.0), 1)
    meter.end_step(2)
    control.check(2, meter.first_bad_step)  # starts the check; it is read at the next boundary
    with pytest.raises(FloatingPointError, match="optimizer step 1 on rank 0"):
        control.check(3, meter.first_bad_step)
