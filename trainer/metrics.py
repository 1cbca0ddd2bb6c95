"""On-device accumulators: nothing here forces a host sync until a log interval asks for the value.

Kept to a few tensor ops per step: on a small model each eager op is a visible share of the step.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist


class LossMeter:
    """Sum of per-sample losses over a log interval (device, float64; the sample count is known on the
    host), plus the first optimizer step whose loss was not finite (inf: none)."""

    def __init__(self, device: torch.device) -> None:
        self.loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        self.samples = 0
        self.first_bad_step = torch.full((), math.inf, dtype=torch.float64, device=device)

    def add(self, mean_loss: torch.Tensor, samples: int) -> None:
        """One micro-batch: its mean loss (a 0-dim tensor) over `samples` samples."""
        self.loss_sum.add_(mean_loss.detach(), alpha=samples)
        self.samples += samples

    def end_step(self, step: int) -> None:
        """Close optimizer step `step` (1-based). A nan/inf in the interval's sum stays there until the
        next log, so the smallest step at which the sum is not finite is the first bad step."""
        bad_at = torch.where(torch.isfinite(self.loss_sum), math.inf, float(step))
        torch.minimum(self.first_bad_step, bad_at, out=self.first_bad_step)

    def reduce_mean(self, distributed: bool) -> float | None:
        """Mean loss over every sample of every rank since the last call, on rank 0 (None elsewhere
        and when nothing was seen). One reduce and one host sync per log interval."""
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
