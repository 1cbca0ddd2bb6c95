"""Loss functions as `fn(model, batch) -> scalar` (the user-code shape), plus accuracy when it applies."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from trainer.spec import LossSpec

LossFn = Callable[[nn.Module, Any], torch.Tensor]


def _cross_entropy(model: nn.Module, batch: Any) -> torch.Tensor:
    x, y = batch[0], batch[1]
    return F.cross_entropy(model(x), y)


def _mse(model: nn.Module, batch: Any) -> torch.Tensor:
    x, y = batch[0], batch[1]
    out = model(x)
    if not y.is_floating_point():  # class labels against logits: regress onto one-hot targets
        y = F.one_hot(y, out.shape[-1])
    return F.mse_loss(out, y.to(out.dtype).view_as(out))


def _self_scoring(model: nn.Module, batch: Any) -> torch.Tensor:
    return model(*batch) if isinstance(batch, (list, tuple)) else model(batch)


def build_loss(spec: LossSpec | None) -> tuple[LossFn, bool]:
    """The loss fn, and whether validation can also report accuracy (built-in classification only)."""
    if spec is None:  # a user model that scores itself: forward(*batch) returns the loss
        return _self_scoring, False
    if spec.name == "cross_entropy":
        return _cross_entropy, True
    if spec.name == "mse":
        return _mse, False
    from trainer.user_code import import_user_function

    return import_user_function(spec.name, "loss"), False


@torch.no_grad()
def count_correct(model: nn.Module, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss sum, correct count) for a classification batch, on the device (no host sync)."""
    logits = model(batch[0])
    y = batch[1]
    return F.cross_entropy(logits.float(), y, reduction="sum"), (logits.argmax(dim=-1) == y).sum()
