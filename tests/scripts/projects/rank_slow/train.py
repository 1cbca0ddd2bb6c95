"""Two ranks in lock-step; rank 1's own work takes 100 ms more a step (inside `rankzero.rank_work`): the
straggler test's script (issue 38). Wall time per step is the same on both ranks (the all-reduce waits)."""

import time

import torch
import torch.distributed as dist

import rankzero

STEPS = 30

dist.init_process_group("gloo")
rank = dist.get_rank()
for step in range(1, STEPS + 1):
    with rankzero.rank_work():
        x = torch.ones(4) * step
        if rank == 1:  # rank 0's own work is microseconds: whatever the machine's load, rank 1 scores near 2
            time.sleep(0.1)
    dist.all_reduce(x)
    rankzero.progress(step, STEPS)
print(f"rank {rank} done", flush=True)
