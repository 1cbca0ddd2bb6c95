"""A user's own DDP script, tutorial-shaped, with the SDK's lines (run by the tests under torchrun).

    sdk_script.py RESULTS_DIR --steps N [--save-every K] [--sleep S]

Every rank: resumes from `rankzero.load_checkpoint()` if there is one, trains a tiny DDP model on
its own shard, logs its loss (a tensor: averaged across ranks by the SDK) and a per-rank value,
reports progress, saves every K steps, and on `rankzero.should_stop()` saves and exits 75. Each rank
writes what it saw to RESULTS_DIR/rank_<r>.json (its own losses, where it resumed, where it stopped).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import rankzero

BATCH = 8


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("results", type=Path)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--save-every", type=int, default=0)
    p.add_argument("--sleep", type=float, default=0.0)
    p.add_argument("--no-teardown", action="store_true", help="exit without destroy_process_group")
    return p.parse_args()


def main() -> int:
    args = _args()
    distributed = "RANK" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    net = DDP(model) if distributed else model
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    seen: dict = {"rank": rank, "pid": os.getpid(), "losses": {}, "resumed_from": None, "stopped_at": None}
    out = args.results / f"rank_{rank}.json"
    out.write_text(json.dumps(seen))  # the test learns the pid from here

    state = rankzero.load_checkpoint(map_location="cpu")
    start = 0
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = seen["resumed_from"] = int(state["step"])
        seen["resumed_weight"] = state["model"]["weight"].tolist()
    gen = torch.Generator().manual_seed(1000 + rank)  # every rank its own data: different losses
    code = rankzero.EXIT_OK
    for step in range(start + 1, args.steps + 1):
        x, y = torch.randn(BATCH, 4, generator=gen), torch.randint(0, 2, (BATCH,), generator=gen)
        loss = F.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        seen["losses"][step] = loss.item()
        rankzero.log(step, {"train/loss": loss, "rank_plus_step": torch.tensor(float(rank + step)), "lr": 0.1})
        rankzero.progress(step, args.steps, samples=step * BATCH * world)
        stop = rankzero.should_stop()
        if stop or (args.save_every and step % args.save_every == 0):
            ckpt = {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step}
            rankzero.save_checkpoint(ckpt, step, epoch=0)
        if stop:
            seen["stopped_at"], code = step, rankzero.EXIT_STOPPED
            break
        time.sleep(args.sleep)
    seen["exit"] = code
    out.write_text(json.dumps(seen))
    if distributed and not args.no_teardown:
        dist.destroy_process_group()
    return code


if __name__ == "__main__":
    sys.exit(main())
