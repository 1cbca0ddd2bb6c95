"""Test helper: run several trainer jobs in one process (one torchrun launch serves many jobs).

    python tests/trainer/probe.py JOBS.json RESULT.json                                  # one process
    torchrun --standalone --nproc_per_node=2 tests/trainer/probe.py JOBS.json RESULT.json

JOBS.json: [{"spec": {...}, "run_dir": "..."}]. Every DDP model gets a comm hook that counts its
gradient all-reduces (one call per bucket per synchronised backward); rank 0 writes
RESULT.json: [{"exit_code": int, "allreduce_calls": int}].
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from trainer.spec import JobSpec
from trainer.strategy import DDPStrategy
from trainer.train import train


def main(jobs_path: str, result_path: str) -> None:
    torch.set_num_threads(1)
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:  # created here, so train() reuses it for every job instead of re-initialising
        dist.init_process_group("gloo")
    results = []
    with open(jobs_path) as f:
        jobs = json.load(f)
    for job in jobs:
        calls = [0]

        def count_allreduces(strategy, calls=calls):
            if isinstance(strategy, DDPStrategy):

                def hook(state, bucket):
                    calls[0] += 1
                    return default_hooks.allreduce_hook(state, bucket)

                strategy.model.register_comm_hook(None, hook)

        code = train(JobSpec.model_validate(job["spec"]), job["run_dir"], on_strategy=count_allreduces)
        results.append({"exit_code": code, "allreduce_calls": calls[0]})
    if int(os.environ.get("RANK", "0")) == 0:
        with open(result_path, "w") as f:
            json.dump(results, f)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    from trainer.process_exit import exit_now

    main(sys.argv[1], sys.argv[2])
    exit_now(0)  # as the trainer's own ranks end: gloo aborts a rank freed at interpreter teardown (SIGABRT in CI)
