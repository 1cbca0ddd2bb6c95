"""The tutorial DDP script (tests/scripts/projects/tutorial) with rankzero's three lines.

DistributedSampler with set_epoch, the epoch's loss reduced to rank 0 with dist.reduce, a rank-0
torch.save loaded back with map_location; and the SDK: `rankzero.log` every step (the loss curve),
`rankzero.save_checkpoint` at every epoch's end and on a stop / `rankzero.load_checkpoint` on start
(resumption after a restart or a lost worker, mid-epoch: the sampler's order is the same on every
attempt), `rankzero.should_stop` every step → save and exit `rankzero.EXIT_STOPPED`.
Rank 0 prints where each attempt starts and every step it logs (the tests read its stdout).
Run it by hand: `torchrun --nproc-per-node 2 train.py --epochs 2`.
"""

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import rankzero


def say(text: str) -> None:
    """Print on rank 0 only."""
    if dist.get_rank() == 0:
        print(text, flush=True)


def resume(model: DDP, opt: torch.optim.Optimizer, batches_per_epoch: int) -> tuple[int, int, int]:
    """(epoch, batches of it already trained, step) to start from: the job's latest checkpoint, if any."""
    state = rankzero.load_checkpoint(map_location="cpu")  # None on the first attempt
    if state is None:
        return 0, 0, 0
    model.module.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    if state["batches"] == batches_per_epoch:
        return state["epoch"] + 1, 0, state["step"]
    return state["epoch"], state["batches"], state["step"]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds per step (slows the run down)")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    world = dist.get_world_size()
    torch.manual_seed(0)
    x = torch.randn(256, 8)
    dataset = TensorDataset(x, (x.sum(dim=1) > 0).long())
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=16, sampler=sampler)  # 8 steps an epoch on 2 ranks
    model = DDP(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)

    start, done, step = resume(model, opt, len(loader))
    say(f"attempt {os.environ.get('RANKZERO_ATTEMPT', '-')} starts at epoch {start} after step {step}")

    for epoch in range(start, args.epochs):
        sampler.set_epoch(epoch)  # the same order on every attempt: a resumed epoch skips what it trained
        total = torch.zeros(1)
        for i, (xb, yb) in enumerate(loader):
            if i < done:
                continue
            opt.zero_grad()
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            total += loss.detach()
            step += 1
            rankzero.log(step, {"train/loss": loss})  # every rank; averaged across ranks
            say(f"step {step}")
            time.sleep(args.sleep)
            stop = rankzero.should_stop()  # every rank, every step: True on all of them at once
            if stop or i + 1 == len(loader):
                ckpt = {"model": model.module.state_dict(), "opt": opt.state_dict(), "epoch": epoch,
                        "batches": i + 1, "step": step}  # fmt: skip
                rankzero.save_checkpoint(ckpt, step, epoch=epoch)  # rank 0 writes; others return None
            if stop:
                return rankzero.EXIT_STOPPED
        done = 0
        dist.reduce(total, dst=0)  # the sum over ranks lands on rank 0
        say(f"epoch {epoch} loss {total.item() / (world * len(loader)):.4f}")  # rank 0 holds the sum

    if dist.get_rank() == 0:
        torch.save({"model": model.module.state_dict(), "epochs": args.epochs}, "checkpoint.pt")
    dist.barrier()
    loaded = torch.load("checkpoint.pt", map_location="cpu")
    model.module.load_state_dict(loaded["model"])
    say(f"checkpoint loaded back after {loaded['epochs']} epochs")
    dist.destroy_process_group()
    return rankzero.EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
