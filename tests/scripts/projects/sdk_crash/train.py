"""Two ranks log a loss every step with the SDK; rank 1 hits a NameError at step 5 (a typo), rank 0
goes on into the next all-reduce. The job must fail at once with rank 1's NameError as its headline:
the SDK's exit hook skips its flush on an uncaught exception instead of waiting on rank 0."""

import time

import torch
import torch.distributed as dist

import rankzero

dist.init_process_group("gloo")
rank = dist.get_rank()
weight = torch.ones(4, requires_grad=True)
for step in range(1, 1000):
    loss = (weight * step).sum()
    rankzero.log(step, {"train/loss": loss.detach()})
    if rank == 1 and step == 5:
        print(undefined_batch)  # noqa: F821  # pyright: ignore[reportUndefinedVariable]  (the bug this job has)
    buf = torch.ones(1)
    dist.all_reduce(buf)
    time.sleep(0.05)
