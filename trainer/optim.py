"""Optimizer and learning-rate schedule from the spec."""

from __future__ import annotations

import math

import torch
from torch import nn

from trainer.spec import OptimizerSpec, SchedulerSpec


def build_optimizer(model: nn.Module, spec: OptimizerSpec) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    if spec.name == "sgd":
        return torch.optim.SGD(
            params, lr=spec.lr, momentum=spec.momentum, nesterov=spec.nesterov, weight_decay=spec.weight_decay
        )
    cls = torch.optim.AdamW if spec.name == "adamw" else torch.optim.Adam
    return cls(params, lr=spec.lr, betas=(spec.betas[0], spec.betas[1]), eps=spec.eps, weight_decay=spec.weight_decay)


def lr_factor(spec: SchedulerSpec, step: int, total_steps: int) -> float:
    """Multiplier on the peak lr for optimizer step `step` (0-based): linear warmup, then the schedule."""
    if step < spec.warmup_steps:
        return (step + 1) / spec.warmup_steps
    after = step - spec.warmup_steps
    if spec.name == "cosine":
        span = max(1, total_steps - spec.warmup_steps)
        progress = min(1.0, after / span)
        return spec.min_lr_ratio + (1.0 - spec.min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))
    if spec.name == "step":
        return spec.gamma ** (after // spec.step_size)
    return 1.0


def build_scheduler(
    optimizer: torch.optim.Optimizer, spec: SchedulerSpec, total_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    # A closure, not a callable object: LambdaLR's state_dict then stays plain data (weights_only loads it).
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(spec, step, total_steps))
