"""`rankzero.log`: every rank calls it; tensor values are averaged across ranks, rank 0 writes them.

Per call: one stack of the call's tensor values on their device (no host sync). With a process
group, calls are gathered into rows and one async all-reduce (SUM) averages a whole block of rows:
a tiny all-reduce per step costs a small CPU DDP loop 15-20 % of its speed, one per block nothing
measurable. How many calls make a block is agreed in that same all-reduce (a last column: each rank
proposes about `BLOCK_S` worth of calls at its own pace, the mean wins; blocks at most double from
one to the next, up to `MAX_BLOCK`), so every rank reduces on the same call. A block also ends when
the set of tensor names changes, on `rankzero.flush()`, before `torch.distributed.destroy_process_group()`
and at exit (while the process group is still up). Metrics therefore reach events.jsonl about
`BLOCK_S` late; plain numbers (an lr) are rank 0's own and written at once.

Nothing waits for the device or the collective on the training thread: the writer thread of
`trainer.events` waits for the all-reduce (CPU) or for an event after a non-blocking copy to pinned
memory (CUDA), divides by the world size and turns the values into floats.
"""

from __future__ import annotations

import atexit
import functools
import math
import operator
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from rankzero import _runtime
from trainer.event_types import EventType, Metric

BLOCK_S = 0.5
MAX_BLOCK = 1_000
# The exit flush waits at most this long for the other ranks' share of the last block (a normal
# exit: they are exiting too). After an uncaught exception it does not run at all (`_flush_at_exit`).
EXIT_WAIT = timedelta(seconds=2)
# What the exit hook prints when it skips the flush after a crash: "rankzero: " lines are the SDK's own,
# never a failure's headline (worker/errors.py passes over them).
SKIPPED_ON_CRASH = "rankzero: exiting on an uncaught exception: the last {} logged steps were not averaged (no wait)"


@dataclass(frozen=True)
class _Values:
    """A block of rows on its way to the host; `rows()` runs on the writer thread."""

    data: torch.Tensor  # flat rows (+ the cadence column): on the device (CPU), or pinned memory (CUDA)
    work: dist.Work | None  # the all-reduce that fills `data` (CPU)
    ready: torch.cuda.Event | None  # recorded after the copy into `data` (CUDA)
    divisor: int
    width: int  # values per row
    count: int  # rows (a block's `data` also holds the cadence column after them)

    def wait(self, timeout: timedelta | None = None) -> None:
        if self.ready is not None:
            self.ready.synchronize()
        elif self.work is not None:
            self.work.wait() if timeout is None else self.work.wait(timeout)

    def rows(self) -> list[list[float]]:
        self.wait()
        flat = [v / self.divisor for v in self.data.tolist()]
        return [flat[i * self.width : (i + 1) * self.width] for i in range(self.count)]

    def agreed_block(self) -> int:
        """The block length every rank proposed, averaged (the cadence column: integer sums, exact)."""
        self.wait()
        return max(int(self.data[-1].item()) // self.divisor, 1)


def _home(data: torch.Tensor, work: dist.Work | None, divisor: int, width: int, count: int) -> _Values:
    """Start bringing `data` to the host without waiting: on CUDA a non-blocking copy to pinned memory."""
    if data.device.type != "cuda":
        return _Values(data, work, None, divisor, width, count)
    if work is not None:
        work.wait()  # NCCL: the current stream waits for the collective; the host does not
    host = torch.empty(data.shape, dtype=data.dtype, pin_memory=True)
    host.copy_(data, non_blocking=True)
    ready = torch.cuda.Event()
    ready.record(torch.cuda.current_stream(data.device))
    return _Values(host, None, ready, divisor, width, count)


def _finite(value: float) -> float | None:
    """JSON has no nan/inf: such a value is written as null (the ingester skips it)."""
    return value if math.isfinite(value) else None


def _emit(names: tuple[str, ...], steps: list[int], values: _Values) -> None:
    events = _runtime.events()
    if events is None:
        return

    def fields() -> list[Metric]:  # on the writer thread
        rows = values.rows()
        return [
            {"step": step, "name": name, "value": _finite(v)}
            for step, row in zip(steps, rows, strict=True)
            for name, v in zip(names, row, strict=True)
        ]

    events.emit_later(EventType.metric, len(steps) * len(names), fields)


def _collective_device(first: torch.device) -> torch.device:
    """NCCL reduces CUDA tensors only; other backends (gloo) take the values where they are."""
    if _runtime.initialized() and dist.get_backend() == "nccl" and first.type != "cuda":
        return torch.device("cuda", torch.cuda.current_device())
    return first


class _Blocks:
    """This process's rows not yet reduced, and the agreed block length."""

    def __init__(self) -> None:
        self.names: tuple[str, ...] = ()
        self.rows: list[torch.Tensor] = []
        self.steps: list[int] = []
        self.block = 1
        self.pending: _Values | None = None
        self.since: float | None = None  # when the last block was reduced
        self.hooked = False

    def add(self, step: int, names: tuple[str, ...], row: torch.Tensor) -> None:
        if self.rows and names != self.names:
            self.flush()
        self.names = names
        self.rows.append(row)
        self.steps.append(step)
        if not self.hooked:
            self.hooked = True
            _hook_teardown()
        if len(self.rows) >= self.block:
            self.flush()

    def proposal(self) -> int:
        """About BLOCK_S worth of calls at this rank's pace; at most double the current block."""
        if self.since is None:
            return 1
        per_call = (time.monotonic() - self.since) / max(len(self.rows), 1)
        return int(min(max(BLOCK_S / max(per_call, 1e-9), 1), 2 * self.block, MAX_BLOCK))

    def flush(self, timeout: timedelta | None = None) -> None:
        """Reduce the rows gathered so far (every rank, at the same call)."""
        if not self.rows:
            return
        if self.pending is not None:
            self.block = self.pending.agreed_block()  # long done by now: no real wait
        world = _runtime.world_size()
        rows = torch.stack(self.rows)
        cadence = torch.full((1,), float(self.proposal()), dtype=rows.dtype, device=rows.device)
        data = torch.cat([rows.flatten(), cadence])
        work = dist.all_reduce(data, op=dist.ReduceOp.SUM, async_op=True) if world > 1 else None
        self.pending = _home(data, work, world, len(self.names), len(self.rows))
        if timeout is not None:
            self.pending.wait(timeout)
        _emit(self.names, self.steps, self.pending)
        self.rows, self.steps, self.since = [], [], time.monotonic()


_blocks = _Blocks()


def flush() -> None:
    """Average and write the metrics logged so far; call it on every rank (a collective when some
    are waiting). Needed only before tearing the process group down yourself by a name imported
    before the first `log` (`dist.destroy_process_group()` and exit flush by themselves)."""
    if _runtime.initialized():
        _blocks.flush()


def _flush_last(timeout: timedelta | None = None) -> None:
    if not _runtime.initialized() or not _blocks.rows:
        return
    try:
        _blocks.flush(timeout=timeout)
    except Exception as exc:  # a peer already gone: its last rows cannot be averaged
        print(f"rankzero: the last {len(_blocks.rows)} logged steps were not written: {exc}", file=sys.stderr)


def _flush_at_exit() -> None:
    """At exit: average the last rows, waiting at most EXIT_WAIT; skipped on a crash, which never waits
    for peers (a rank that raised must show its traceback and exit at once: its peers may be gone)."""
    if _runtime.crashed():
        print(SKIPPED_ON_CRASH.format(len(_blocks.rows)), file=sys.stderr, flush=True)
        return
    _flush_last(EXIT_WAIT)


def _hook_teardown() -> None:
    """Flush before the default process group goes away (the tutorials' cleanup) and at exit."""
    atexit.register(_flush_at_exit)
    original = dist.destroy_process_group
    if getattr(original, "_rankzero_flushes", False):
        return

    @functools.wraps(original)
    def destroy_process_group(group: Any = None, *args: Any, **kwargs: Any) -> Any:
        if group is None or group is dist.GroupMember.WORLD:
            _flush_last()
        return original(group, *args, **kwargs)

    destroy_process_group._rankzero_flushes = True  # type: ignore[attr-defined]
    dist.destroy_process_group = destroy_process_group


def _split(values: Mapping[str, Any]) -> tuple[tuple[str, ...], list[torch.Tensor], dict[str, float]]:
    """Tensor values sorted by name (every rank stacks them in the same order) and the plain numbers."""
    names, tensors, numbers = [], [], {}
    for name in sorted(values):
        if not isinstance(name, str) or not name:
            raise TypeError(f"rankzero.log: metric names are non-empty strings, got {name!r}")
        value = values[name]
        if isinstance(value, torch.Tensor):
            if value.numel() != 1:  # metadata only: no device sync
                raise ValueError(f"rankzero.log: {name!r} has {value.numel()} elements; log a scalar (loss.mean())")
            names.append(name)
            tensors.append(value.detach().reshape(()))
        else:
            numbers[name] = float(value)
    return tuple(names), tensors, numbers


def _row(tensors: list[torch.Tensor]) -> torch.Tensor:
    """The call's tensor values as one float64 vector (float32 on MPS) where the collective runs."""
    device = _collective_device(tensors[0].device)
    dtype = torch.float32 if device.type == "mps" else torch.float64
    return torch.stack([t.to(device) for t in tensors]).to(dtype)


def log(step: int, values: Mapping[str, Any]) -> None:
    """Record `values` (name → 0-dim tensor or number) at `step`; call it on every rank.

    Tensors are averaged across ranks, so every rank must call it, with the same tensor names (a
    tensor logged under `if rank == 0:` would leave an all-reduce unmatched: log rank 0's own value
    there as a number, `loss.item()`). Plain numbers (an lr, an epoch) are rank 0's own, not reduced
    and need no other rank. Rank 0 writes one `metric` event per name. The call never waits for the
    disk, the device or the other ranks. Outside the service (no RANKZERO_RUN_DIR) it does nothing.
    """
    step = operator.index(step)
    if _runtime.job().local:
        _runtime.notice_local()
        return
    names, tensors, numbers = _split(values)
    events = _runtime.events()
    if events is not None:
        for name, value in numbers.items():
            events.emit(EventType.metric, step=step, name=name, value=_finite(value))
    if not tensors:
        return
    row = _row(tensors)
    if _runtime.world_size() > 1:
        _blocks.add(step, names, row)
    elif events is not None:
        _emit(names, [step], _home(row, None, 1, len(names), 1))
