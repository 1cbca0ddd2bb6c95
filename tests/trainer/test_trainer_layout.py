"""The global-batch layout on its own: the arithmetic the equivalence promise rests on."""

from __future__ import annotations

import pytest

from trainer.data.layout import BatchLayout, RankBatchSampler


def layout(w: int, a: int, b: int = 3, n: int = 50, shuffle: bool = True, seed: int = 1) -> BatchLayout:
    return BatchLayout(num_samples=n, batch_size=b, accumulation_steps=a, world_size=w, seed=seed, shuffle=shuffle)


def test_sizes_and_ragged_tail_dropped():
    lay = layout(2, 2, b=3, n=50)
    assert lay.slots == 4 and lay.global_batch == 12 and lay.steps_per_epoch == 4  # 48 used, 2 dropped


def test_every_slot_is_full_and_a_step_covers_its_global_batch_once():
    lay = layout(2, 3, b=2, n=40)
    for step in range(lay.steps_per_epoch * 2):
        slots = [lay.indices(step, a, r) for a in range(3) for r in range(2)]
        assert all(len(s) == 2 for s in slots)
        flat = sorted(i for s in slots for i in s)
        assert flat == sorted(lay.global_batch_indices(step))
        assert len(set(flat)) == lay.global_batch


def test_an_epoch_visits_distinct_samples():
    lay = layout(2, 2, b=3, n=50)
    seen = [i for s in range(lay.steps_per_epoch) for i in lay.global_batch_indices(s)]
    assert len(seen) == len(set(seen)) == 48


def test_slot_is_micro_step_times_world_plus_rank_strided_through_the_global_batch():
    lay = layout(2, 2, b=3, n=48, shuffle=False)
    assert lay.global_batch_indices(1) == list(range(12, 24))
    assert lay.indices(1, 0, 0) == [12, 16, 20]  # slot 0
    assert lay.indices(1, 0, 1) == [13, 17, 21]  # slot 1
    assert lay.indices(1, 1, 0) == [14, 18, 22]  # slot 2 = 1 × W + 0
    assert lay.indices(1, 1, 1) == [15, 19, 23]


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize(("w", "a"), [(2, 1), (4, 1), (2, 2), (4, 2)])
def test_same_w_times_a_gives_every_slot_the_same_samples(w, a, shuffle):
    """(W, A) and (1, W×A): slot j holds the same samples at every step — the equivalence promise."""
    multi, single = layout(w, a, shuffle=shuffle, n=97), layout(1, w * a, shuffle=shuffle, n=97)
    for step in range(multi.steps_per_epoch * 3):
        for micro in range(a):
            for rank in range(w):
                assert multi.indices(step, micro, rank) == single.indices(step, micro * w + rank, 0)


def test_shuffle_is_seeded_differs_by_epoch_and_seed():
    a, b = layout(2, 1), layout(2, 1)
    assert a.epoch_order(0) == b.epoch_order(0)  # every rank computes the same order
    assert a.epoch_order(0) != a.epoch_order(1)
    assert a.epoch_order(0) != layout(2, 1, seed=2).epoch_order(0)
    assert sorted(a.epoch_order(3)) == list(range(50))


def test_resume_is_starting_at_a_step():
    lay = layout(2, 2, n=60)
    straight = list(RankBatchSampler(lay, 1, 0, 9))
    resumed = list(RankBatchSampler(lay, 1, 4, 9))
    assert resumed == straight[4 * 2 :]
    assert len(RankBatchSampler(lay, 1, 4, 9)) == 10


def test_too_little_data_is_refused_with_advice():
    with pytest.raises(ValueError, match="fewer than one global batch"):
        layout(4, 4, b=8, n=100)
