"""`rankzero.params()`: the job's named hyperparameters (spec `params`), as the service stored them.

The worker writes the attempt's spec into the run dir (`<run_dir>/spec.json`, trainer/run_dir.py) before
the ranks start, so every rank reads the same values without another variable in its environment. Run by
hand (local mode, no RANKZERO_RUN_DIR) it returns `local` (default: an empty dict), so a script can
give its own defaults: `p = rankzero.params(local={"lr": 0.1})`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from rankzero import env
from trainer.run_dir import RunDir

ParamValue = str | bool | int | float


def params(local: Mapping[str, ParamValue] | None = None) -> dict[str, ParamValue]:
    """The job's `params` block ({} when it has none); `local` (or {}) when not run by the service."""
    job = env.read()
    if job.run_dir is None:
        return dict(local or {})
    path = RunDir(job.run_dir).spec
    try:
        stored: Any = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise RuntimeError(f"cannot read this job's spec at {path} ({exc}): was the run dir moved?") from None
    values = stored.get("params") if isinstance(stored, dict) else None
    return dict(values) if isinstance(values, dict) else {}
