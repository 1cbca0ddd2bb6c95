"""On-device accumulators: nothing here forces a host sync until a log interval asks for the value.

A step costs no tensor op here: each micro-batch's loss is kept as it is (a 0-dim tensor, detached),
and the pending ones are folded into the interval's sum and the first-bad-step watch only when
someone reads them — the stop / non-finite check every few steps, the log every `log_every` steps.
On a small model each eager op is a visible share of the step (on a GPU, a kernel launch each).
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist


class LossMeter:
    """Sum of per-sample losses over a log interval (device, float64; the sample count is known on the
    host), plus the first optimizer step whose loss was not finite (inf: none).

    Every optimizer step has `micro_batches` micro-batches (`add` each, then `end_step`)."""

    def __init__(self, device: torch.device, micro_batches: int = 1) -> None:
        self.device, self.micro_batches = device, micro_batches
        self.loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        self.samples = 0
        self._first_bad = torch.full((), math.inf, dtype=torch.float64, device=device)
        self._pending: list[torch.Tensor] = []  # each micro-batch's mean loss since the last fold
        self._weights: list[int] = []  # and its sample count
        self._steps_pending = 0  # optimizer steps ended since the last fold
        self._done = 0  # the last step ended

    def add(self, mean_loss: torch.Tensor, samples: int) -> None:
        """One micro-batch: its mean loss (a 0-dim tensor) over `samples` samples."""
        self._pending.append(mean_loss.detach())
        self._weights.append(samples)
        self.samples += samples

    def end_step(self, step: int) -> None:
        """Close optimizer step `step` (1-based; steps end in order)."""
        self._steps_pending += 1
        self._done = step

    def first_bad_step(self) -> torch.Tensor:
        """The first step (so far) with a non-finite loss, as a float64 device tensor (inf: none)."""
        self._fold()
        return self._first_bad

    def _fold(self) -> None:
        """Add the pending micro-batches to the interval's sum and to the first-bad-step watch: a
        dozen ops however many steps are pending, and no host sync."""
        if not self._pending:
            return
        losses = torch.stack(self._pending).to(torch.float64)
        weights, micro = self._weights, self.micro_batches
        if len(losses) != self._steps_pending * micro:
            raise RuntimeError(
                f"LossMeter: {len(losses)} micro-batch losses for {self._steps_pending} steps of {micro} micro-batches"
            )
        if all(w == weights[0] for w in weights):
            self.loss_sum.add_(losses.sum(), alpha=weights[0])
        else:
            self.loss_sum.add_(torch.stack([loss * w for loss, w in zip(losses, weights, strict=True)]).sum())
        # The first non-finite micro-batch's index → its step (the pending steps are consecutive).
        index = torch.arange(len(losses), dtype=torch.float64, device=self.device)
        first_index = torch.where(torch.isfinite(losses), math.inf, index).min()
        first_step = self._done - self._steps_pending + 1
        bad_at = torch.floor(first_index / micro) + first_step  # inf stays inf
        torch.minimum(self._first_bad, bad_at, out=self._first_bad)
        self._pending, self._weights, self._steps_pending = [], [], 0

    def reduce_mean(self, distributed: bool) -> float | None:
        """Mean loss over every sample of every rank since the last call, on rank 0 (None elsewhere
        and when nothing was seen). One reduce and one host sync per log interval."""
        self._fold()
        totals = torch.stack(
            [self.loss_sum, torch.tensor(float(self.samples), dtype=torch.float64, device=self.loss_sum.device)]
        )
        self.loss_sum.zero_()
        self.samples = 0
        if distributed:
            dist.reduce(totals, dst=0, op=dist.ReduceOp.SUM)
            if dist.get_rank() != 0:
                return None
        total, count = totals.tolist()
        return total / count if count else None
