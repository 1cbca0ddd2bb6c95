"""User code for the trainer's tests: a model, a data factory and losses named as 'rz_user_code:...'."""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset


class SelfScoring(nn.Module):
    """A model that computes its own loss (the `loss: null` shape)."""

    def __init__(self, features: int, classes: int) -> None:
        super().__init__()
        self.net = nn.Linear(features, classes)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.net(x), y)


def make_model(features: int = 8, classes: int = 3) -> nn.Module:
    return nn.Sequential(nn.Linear(features, 16), nn.Tanh(), nn.Linear(16, classes))


def make_self_scoring(features: int = 8, classes: int = 3) -> nn.Module:
    return SelfScoring(features, classes)


def make_data(n: int = 256, features: int = 8, classes: int = 3):
    """Returns (train, val) as plain TensorDatasets (exercises the generic DataLoader path)."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(n, features, generator=g)
    y = (x[:, :classes]).argmax(dim=1)
    return TensorDataset(x[: n * 3 // 4], y[: n * 3 // 4]), TensorDataset(x[n * 3 // 4 :], y[n * 3 // 4 :])


def loss_fn(model: nn.Module, batch) -> torch.Tensor:
    x, y = batch
    return F.cross_entropy(model(x), y)


_calls = {"n": 0}


def nan_after_three(model: nn.Module, batch) -> torch.Tensor:
    """Finite for the first 3 micro-batches on each rank, then nan on rank RZ_NAN_RANK (default 0)."""
    _calls["n"] += 1
    loss = loss_fn(model, batch)
    if _calls["n"] > 3 and int(os.environ.get("RANK", "0")) == int(os.environ.get("RZ_NAN_RANK", "0")):
        return loss * float("nan")
    return loss


def fail_on_rank_one(model: nn.Module, batch) -> torch.Tensor:
    """Raises on rank 1 at its third micro-batch: the failed event must name rank 1."""
    _calls["n"] += 1
    if _calls["n"] == 3 and int(os.environ.get("RANK", "0")) == 1:
        raise RuntimeError("boom from rank 1 (test)")
    return loss_fn(model, batch)
