"""User code for the fault tests (allowed by their RANKZERO_ALLOWED_CODE=tests.support.slow_model).

`slow_mlp` is the built-in MLP whose forward also sleeps `step_s` seconds: a run lasts long enough to
be killed mid-way, while its weights stay exactly those of the plain MLP (sleeping changes no math).

Faults on request (all off by default): `hang_at_step` (rank `hang_rank` sleeps forever in its Nth
training forward), `hang_in_build` (every rank sleeps forever while the model is built, before the
trainer's `started` event), `poison_at_step` (rank 0 appends an event the worker cannot ingest: a
`checkpoint` whose step is not a number), `hang_at_exit` (rank `hang_rank` sleeps forever on its way out, after
the trainer's `finished`: a hung teardown), `hold_at_step` (in the job's first attempt, every rank waits in
its Nth training forward until it has been sent SIGTERM: a stop that must land mid-run lands there, however
loaded the machine, and the step is then finished and checkpointed as any stop is).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainer.models import mlp


class SlowModule(nn.Module):
    def __init__(self, net: nn.Module, step_s: float, faults: dict[str, int] | None = None) -> None:
        super().__init__()
        self.net = net
        self.step_s = step_s
        self.faults = faults or {}
        self.calls = 0
        self.rank = int(os.environ.get("RANK", "0"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.calls += 1
            self._misbehave()
        if self.step_s > 0 and self.training:
            time.sleep(self.step_s)
        return self.net(x)

    def _misbehave(self) -> None:
        f = self.faults
        if f.get("hang_at_step") == self.calls and f.get("hang_rank", 1) == self.rank:
            while True:
                time.sleep(3600)
        if f.get("hold_at_step") == self.calls and os.environ.get("RANKZERO_ATTEMPT", "1") == "1":
            while not _stop_requested():
                time.sleep(0.05)
        if f.get("poison_at_step") == self.calls and self.rank == 0 and os.environ.get("RANKZERO_RUN_DIR"):
            bad = {"seq": 10**9, "time": time.time(), "type": "checkpoint", "path": "checkpoints/x.pt", "step": "ten"}
            with open(Path(os.environ["RANKZERO_RUN_DIR"]) / "events.jsonl", "a") as f_out:
                f_out.write(json.dumps(bad) + "\n")


def _stop_requested() -> bool:
    """Whether SIGTERM has reached this rank: the trainer's handler (trainer/control.py StopSignal) flags it."""
    handler = signal.getsignal(signal.SIGTERM)
    return bool(getattr(getattr(handler, "__self__", None), "requested", False))


def slow_mlp(  # noqa: PLR0913 (one keyword per fault: the spec's model args)
    step_s: float = 0.0,
    hang_at_step: int = 0,
    hold_at_step: int = 0,
    hang_rank: int = 1,
    hang_in_build: bool = False,
    poison_at_step: int = 0,
    hang_at_exit: bool = False,
    **mlp_args: Any,
) -> nn.Module:
    while hang_in_build:
        time.sleep(3600)
    if hang_at_exit and int(os.environ.get("RANK", "0")) == hang_rank:  # the rank's exit waits for it, after `finished`
        threading.Thread(target=time.sleep, args=(3600,), name="hangs-at-exit", daemon=False).start()
    faults = {
        "hang_at_step": hang_at_step,
        "hang_rank": hang_rank,
        "poison_at_step": poison_at_step,
        "hold_at_step": hold_at_step,
    }
    return SlowModule(mlp(**mlp_args), step_s, {k: v for k, v in faults.items() if v or k == "hang_rank"})
