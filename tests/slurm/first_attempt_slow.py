"""User code for the requeue tests: the MLP, slow only in the job's first attempt (RANKZERO_ATTEMPT=1), so the
first attempt is surely still training when Slurm's signal comes and the resumed one ends in seconds. Sleeping
changes no math: the weights are the plain MLP's."""

from __future__ import annotations

import os
from typing import Any

from torch import nn

from tests.support.slow_model import SlowModule
from trainer.models import mlp


def slow_first_attempt(step_s: float = 0.2, **mlp_args: Any) -> nn.Module:
    slow = os.environ.get("RANKZERO_ATTEMPT") == "1"
    return SlowModule(mlp(**mlp_args), step_s if slow else 0.0)
