"""`rankzero.should_stop`: True on every rank, on the same call, once any rank got SIGTERM.

The service stops a job (cancel, a worker draining, preemption) with SIGTERM to every rank, then
SIGKILL after a grace period. The first call installs a SIGTERM handler that only sets a flag
(it replaces any earlier SIGTERM handler; before that first call SIGTERM still ends the process).

Agreement, as the built-in trainer's `trainer.control` does it: at check calls every rank launches an
async all-reduce (MAX) of [stop requested, proposed interval] and reads it at the next check call, so
no call waits for the collective. Checks fall on the same call numbers on every rank: the interval
between them is agreed in that same vector (each rank proposes about `CHECK_EVERY_S` worth of calls,
the largest wins; it at most doubles from one check to the next, up to MAX_EVERY: a loop whose pace
drops sharply from thousands of calls a second may take up to MAX_EVERY calls to see a stop). On
CUDA the result comes home by a non-blocking copy and an event, not a sync. Every rank must call it
the same number of times (e.g. once per step). Without a process group the flag is answered directly.
"""

from __future__ import annotations

import sys
import time

import torch
import torch.distributed as dist

from rankzero import _runtime
from trainer.control import StopSignal

CHECK_EVERY_S = 1.0
MAX_EVERY = 1_000


class _Pending:
    """One launched check: the all-reduce and how its result comes back to the host."""

    def __init__(self, vec: torch.Tensor) -> None:
        self.work = dist.all_reduce(vec, op=dist.ReduceOp.MAX, async_op=True)
        self.host, self.ready = vec, None
        if vec.device.type == "cuda":
            self.work.wait()  # NCCL: a stream dependency, no host wait
            self.host = torch.empty(vec.shape, dtype=vec.dtype, pin_memory=True)
            self.host.copy_(vec, non_blocking=True)
            self.ready = torch.cuda.Event()
            self.ready.record(torch.cuda.current_stream(vec.device))

    def result(self) -> tuple[bool, int]:
        if self.ready is not None:
            self.ready.synchronize()
        else:
            self.work.wait()
        stop, every = self.host.tolist()
        return stop > 0, int(every)


class _Agreement:
    def __init__(self) -> None:
        self.signal = StopSignal()
        self.installed = self.decided = False
        self.calls = 0
        self.next_check = self.every = 1
        self.pending: _Pending | None = None
        self.since: tuple[int, float] | None = None  # (calls, time) at the last check

    def install(self) -> None:
        self.installed = True
        try:
            self.signal.install()
        except ValueError:  # signal handlers live on the main thread only
            print("rankzero: should_stop() called off the main thread; SIGTERM is not caught", file=sys.stderr)

    def proposal(self) -> int:
        """How many calls make about CHECK_EVERY_S at this rank's pace since the last check (1 at first)."""
        if self.since is None:
            return 1
        calls, began = self.since
        per_call = (time.monotonic() - began) / max(self.calls - calls, 1)
        return int(min(max(CHECK_EVERY_S / max(per_call, 1e-9), 1), 2 * self.every, MAX_EVERY))

    def device(self) -> torch.device:
        if dist.get_backend() == "nccl":
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")

    def check(self) -> bool:
        """At a check call: read the previous vector, launch the next one."""
        if self.pending is not None:
            stop, self.every = self.pending.result()
            self.pending = None
            if stop:
                return True
        vec = torch.empty(2, dtype=torch.float64, device=self.device())
        vec.fill_(float(self.proposal()))  # fills on the device: no host-to-device copy to wait for
        vec[0] = float(self.signal.requested)
        self.pending = _Pending(vec)
        self.since = (self.calls, time.monotonic())
        self.next_check = self.calls + max(self.every, 1)
        return False

    def should_stop(self) -> bool:
        if not self.installed:
            self.install()
        if not self.decided:
            if _runtime.world_size() <= 1:
                self.decided = self.signal.requested
            else:
                self.calls += 1
                self.decided = self.calls >= self.next_check and self.check()
        return self.decided


_agreement = _Agreement()


def should_stop() -> bool:
    """True once a stop was requested (SIGTERM) on any rank, on the same call on every rank, and from
    then on. Call it on every rank once per step; on True, save (`save_checkpoint`) and exit with
    `rankzero.EXIT_STOPPED` (75), which the service reads as "stopped, resumable"."""
    return _agreement.should_stop()
