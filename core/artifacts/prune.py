"""`keep_last` in the store: which of a job's stored checkpoints to delete (pure)."""

from __future__ import annotations

from trainer.checkpoint_files import checkpoint_step


def to_prune(keys: list[str], keep_last: int) -> list[str]:
    """The checkpoint keys beyond the newest `keep_last` (by step); other keys are never pruned."""
    steps = sorted((step, key) for key in keys if (step := checkpoint_step(key)) is not None)
    return [key for _, key in steps[: max(0, len(steps) - max(1, keep_last))]]
