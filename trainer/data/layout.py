"""The global-batch layout: the one place that decides which samples a rank sees at a micro-step.

This arithmetic *is* the equivalence promise (DESIGN.md "Data layout"):

* Epoch `e` orders the training set by a permutation seeded by (seed, e) — identical on every rank,
  so no rank needs to talk to another to agree on it. Without shuffling the order is 0..N-1.
* Optimizer step `s` falls in epoch `s // steps_per_epoch` and consumes the next `global_batch`
  samples of that order. A ragged tail shorter than one global batch is dropped, so every slot is
  full and every step's gradient is a mean over exactly `global_batch` samples.
* The global batch is cut into `world_size × accumulation_steps` slots of `batch_size` samples.
  Rank r at micro-step a takes slot `a × world_size + r`, and slot j holds the samples at positions
  j, j + slots, j + 2·slots, ... of the global batch (strided, as DistributedSampler strides).

So (W ranks, A micro-steps) and (1 rank, W×A micro-steps) give slot j the same samples, each step
averages the same gradients, and the weights agree to float rounding. Resuming is starting at a step.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class BatchLayout:
    num_samples: int
    batch_size: int
    accumulation_steps: int
    world_size: int
    seed: int
    shuffle: bool
    _orders: dict[int, list[int]] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.steps_per_epoch == 0:
            raise ValueError(
                f"the training set has {self.num_samples} samples, fewer than one global batch of "
                f"{self.global_batch} (batch_size {self.batch_size} × accumulation_steps {self.accumulation_steps} "
                f"× {self.world_size} processes); lower batch_size or use more data"
            )

    @property
    def slots(self) -> int:
        """Micro-batches per optimizer step over all ranks."""
        return self.world_size * self.accumulation_steps

    @property
    def global_batch(self) -> int:
        return self.slots * self.batch_size

    @property
    def steps_per_epoch(self) -> int:
        return self.num_samples // self.global_batch

    def epoch_order(self, epoch: int) -> list[int]:
        """The training order of epoch `epoch` (every rank computes the same one)."""
        order = self._orders.get(epoch)
        if order is None:
            if self.shuffle:
                # (seed, epoch) → one generator seed; the multiplier keeps (seed, e+1) apart from (seed+1, e).
                gen = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
                order = torch.randperm(self.num_samples, generator=gen).tolist()
            else:
                order = list(range(self.num_samples))
            self._orders.clear()  # one epoch at a time: the loader walks steps in order
            self._orders[epoch] = order
        return order

    def global_batch_indices(self, step: int) -> list[int]:
        """Every sample index optimizer step `step` (0-based, counted from the start of training) uses."""
        epoch, k = divmod(step, self.steps_per_epoch)
        start = k * self.global_batch
        return self.epoch_order(epoch)[start : start + self.global_batch]

    def slot(self, micro_step: int, rank: int) -> int:
        return micro_step * self.world_size + rank

    def indices(self, step: int, micro_step: int, rank: int) -> list[int]:
        """The `batch_size` sample indices rank `rank` uses at micro-step `micro_step` of step `step`."""
        if not (0 <= micro_step < self.accumulation_steps and 0 <= rank < self.world_size):
            raise IndexError(
                f"micro_step {micro_step} / rank {rank} outside A={self.accumulation_steps}, W={self.world_size}"
            )
        return self.global_batch_indices(step)[self.slot(micro_step, rank) :: self.slots]

    def rank_batches(self, rank: int, start_step: int, end_step: int) -> Iterator[list[int]]:
        """Rank `rank`'s micro-batches for steps [start_step, end_step), in the order it trains on them."""
        for step in range(start_step, end_step):
            batch = self.global_batch_indices(step)
            for a in range(self.accumulation_steps):
                yield batch[self.slot(a, rank) :: self.slots]


class RankBatchSampler:
    """A DataLoader batch_sampler that walks one rank's micro-batches across epochs."""

    def __init__(self, layout: BatchLayout, rank: int, start_step: int, end_step: int) -> None:
        self.layout, self.rank, self.start_step, self.end_step = layout, rank, start_step, end_step

    def __iter__(self) -> Iterator[list[int]]:
        return self.layout.rank_batches(self.rank, self.start_step, self.end_step)

    def __len__(self) -> int:
        return max(0, self.end_step - self.start_step) * self.layout.accumulation_steps
