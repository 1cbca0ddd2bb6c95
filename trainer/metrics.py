"""On-device accumulators: nothing here forces a host sync until a log interval asks for the value."""

from __future__ import annotations

import torch
import torch.distributed as dist


class LossMeter:
    """Sum of per-sample losses and sample count over a log interval, kept on the device in float64,
    plus the first optimizer step whose loss was not finite (0: none yet; steps are 1-based here)."""

    def __init__(self, device: torch.device) -> None:
        self.totals = torch.zeros(2, dtype=torch.float64, device=device)  # [loss sum, samples]
        self.step_loss = torch.zeros((), dtype=torch.float64, device=device)
        self.first_bad_step = torch.zeros((), dtype=torch.float64, device=device)

    def add(self, mean_loss: torch.Tensor, samples: int) -> None:
        """One micro-batch: its mean loss (a 0-dim tensor) over `samples` samples."""
        self.step_loss += mean_loss.detach().double() * samples
        self.totals[1] += samples

    def end_step(self, step: int) -> None:
        """Close optimizer step `step` (1-based): fold it into the interval and note a non-finite loss."""
        bad = ~torch.isfinite(self.step_loss) & (self.first_bad_step == 0)
        self.first_bad_step = torch.where(bad, torch.full_like(self.first_bad_step, step), self.first_bad_step)
        self.totals[0] += self.step_loss
        self.step_loss.zero_()

    def reduce_mean(self, distributed: bool) -> float | None:
        """Mean loss over every sample of every rank since the last call, on rank 0 (None elsewhere
        and when nothing was seen). One reduce and one host sync per log interval."""
        if distributed:
            dist.reduce(self.totals, dst=0, op=dist.ReduceOp.SUM)
        if distributed and dist.get_rank() != 0:
            self.totals.zero_()
            return None
        total, count = self.totals.tolist()
        self.totals.zero_()
        return total / count if count else None
