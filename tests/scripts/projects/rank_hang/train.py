"""Two ranks in lock-step (an all-reduce a step); rank 1 sleeps for ever at step 6, so rank 0 waits for it in
the all-reduce: the stuck-rank test's script (issue 38)."""

import time

import torch
import torch.distributed as dist

import rankzero

STEPS = 1000


def sleep_forever() -> None:
    while True:
        time.sleep(3600)


dist.init_process_group("gloo")
rank = dist.get_rank()
for step in range(1, STEPS + 1):
    x = torch.ones(4)
    if rank == 1 and step == 6:
        print("rank 1 sleeps for ever", flush=True)
        sleep_forever()
    dist.all_reduce(x)
    print(f"rank {rank} step {step}", flush=True)
    rankzero.progress(step, STEPS)
    time.sleep(0.05)
