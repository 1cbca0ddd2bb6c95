"""Run control: SIGTERM → stop at a step boundary every rank agrees on; non-finite loss → fail on every rank.

Agreement without a blocking host sync every step: every `every` steps (and blockingly before a
checkpoint and at the end) each rank launches an async
all-reduce of a small control vector [stop requested, first non-finite step of rank 0, of rank 1, ...]
and waits for it only at the next step boundary, after one more step of work has been queued. All
ranks launch and wait at the same steps, so they all read the same sums and act at the same step.
"""

from __future__ import annotations

import math
import signal
from collections.abc import Callable
from types import FrameType
from typing import Any

import torch
import torch.distributed as dist

STOP_SIGNALS = (signal.SIGTERM,)
_Handler = Callable[[int, FrameType | None], Any] | int | None  # what signal.signal returns and takes


class NonFiniteLoss(FloatingPointError):
    def __init__(self, step: int, rank: int) -> None:
        super().__init__(
            f"loss is not finite (nan or inf) at optimizer step {step} on rank {rank}; "
            "lower optimizer.lr, set grad_clip_norm, or check the data for nan values"
        )
        self.step, self.rank = step, rank


class StopSignal:
    """Remembers that SIGTERM arrived; the handler only sets a flag (safe at any point of a step)."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: dict[int, _Handler] = {}

    def install(self) -> None:
        for sig in STOP_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)

    def uninstall(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True


class RunControl:
    def __init__(self, signal_: StopSignal, rank: int, world_size: int, device: torch.device, every: int) -> None:
        self.signal, self.rank, self.world_size, self.device, self.every = signal_, rank, world_size, device, every
        self._pending: tuple[dist.Work | None, torch.Tensor] | None = None

    def _local_vector(self, first_bad_step: torch.Tensor) -> torch.Tensor:
        vec = torch.zeros(1 + self.world_size, dtype=torch.float64, device=self.device)
        vec[0] = float(self.signal.requested)
        vec[1 + self.rank] = first_bad_step  # device-to-device copy: no host sync
        return vec

    def _act_on(self, vec: torch.Tensor) -> bool:
        values = vec.tolist()
        for rank, bad_step in enumerate(values[1:]):
            if math.isfinite(bad_step):
                raise NonFiniteLoss(int(bad_step), rank)
        return values[0] > 0

    def check(self, step: int, first_bad_step: Callable[[], torch.Tensor]) -> bool:
        """Call at every step boundary (after step `step`, 1-based). True: every rank stops here.
        `first_bad_step` gives this rank's first non-finite step (asked only when a check starts)."""
        if self._pending is not None:
            work, vec = self._pending
            self._pending = None
            if work is not None:
                work.wait()
            if self._act_on(vec):
                return True
        if step % self.every == 0:
            vec = self._local_vector(first_bad_step())
            work = dist.all_reduce(vec, op=dist.ReduceOp.SUM, async_op=True) if self.world_size > 1 else None
            self._pending = (work, vec)
        return False

    def settle(self, first_bad_step: Callable[[], torch.Tensor]) -> bool:
        """A blocking check (before a checkpoint and at the end, which sync anyway): settle the
        in-flight check, raise on a non-finite loss anywhere — so no checkpoint holds nan weights —
        and return whether every rank should stop here."""
        if self._pending is not None:
            work, vec = self._pending
            self._pending = None
            if work is not None:
                work.wait()
        vec = self._local_vector(first_bad_step())
        if self.world_size > 1:
            dist.all_reduce(vec, op=dist.ReduceOp.SUM)
        return self._act_on(vec)
