"""User code for the launcher test: a model factory that records the rank's environment first."""

from __future__ import annotations

import json
import os
from pathlib import Path

from torch import nn


def make_model(out: str, features: int = 8, classes: int = 3) -> nn.Module:
    Path(out, f"model_env_rank_{os.environ.get('RANK', 'x')}.json").write_text(json.dumps(dict(os.environ)))
    return nn.Linear(features, classes)
