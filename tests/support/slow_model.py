"""User code for the fault tests (allowed by their RANKZERO_ALLOWED_CODE=tests.support.slow_model).

`slow_mlp` is the built-in MLP whose forward also sleeps `step_s` seconds: a run lasts long enough to
be killed mid-way, while its weights stay exactly those of the plain MLP (sleeping changes no math).
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import nn

from trainer.models import mlp


class SlowModule(nn.Module):
    def __init__(self, net: nn.Module, step_s: float) -> None:
        super().__init__()
        self.net = net
        self.step_s = step_s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.step_s > 0 and self.training:
            time.sleep(self.step_s)
        return self.net(x)


def slow_mlp(step_s: float = 0.0, **mlp_args: Any) -> nn.Module:
    return SlowModule(mlp(**mlp_args), step_s)
