"""Runs until stopped, printing a heartbeat: the cancel test's script."""

import time

import torch.distributed as dist

dist.init_process_group("gloo")
step = 0
while True:
    step += 1
    print(f"rank {dist.get_rank()} step {step}", flush=True)
    time.sleep(0.2)
