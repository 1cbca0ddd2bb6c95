"""Logs with TensorBoard's SummaryWriter to $RANKZERO_TENSORBOARD_DIR and nothing else (no rankzero)."""

import os

import torch
import torch.distributed as dist
from torch.utils.tensorboard import SummaryWriter

dist.init_process_group("gloo")
rank = dist.get_rank()
writer = SummaryWriter(os.environ.get("RANKZERO_TENSORBOARD_DIR", "runs")) if rank == 0 else None
w = torch.zeros(1, requires_grad=True)
opt = torch.optim.SGD([w], lr=0.1)
for step in range(1, 9):
    opt.zero_grad()
    loss = ((w - 3.0) ** 2).sum()
    loss.backward()
    opt.step()
    if writer is not None:
        writer.add_scalar("train/loss", loss.item(), step)
        writer.add_scalar("lr", 0.1, step)
if writer is not None:
    writer.close()
dist.destroy_process_group()
