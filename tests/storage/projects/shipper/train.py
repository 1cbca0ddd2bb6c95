"""A deterministic script whose checkpoints, console and outputs must reach the API from a host that
does not share its runs dir (tests/storage).

Trains a tiny linear model for --steps steps (a fixed batch per step, seeded by the step), checkpointing
every 2 steps through the SDK and continuing from `rankzero.load_checkpoint()`. It writes outputs into
its working folder (the job's work dir): `plots/loss.txt` (a line per step) and, at the end,
`model/weights.txt`. With --wait-after N a run from scratch stops after step N and waits until it is
killed (the test kills its host there). Runs by hand too: `python train.py` (no service: no checkpoints).
"""

import argparse
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

import rankzero

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=8)
parser.add_argument("--wait-after", type=int, default=0)
args = parser.parse_args()

if "WORLD_SIZE" in os.environ:
    dist.init_process_group("gloo")
rank = dist.get_rank() if dist.is_initialized() else 0
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
start = 0
state = rankzero.load_checkpoint()
if state is not None:
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    start = state["step"]
print(f"rank {rank} starts after step {start}", flush=True)
Path("plots").mkdir(exist_ok=True)

for step in range(start + 1, args.steps + 1):
    gen = torch.Generator().manual_seed(step)
    x = torch.randn(16, 4, generator=gen)
    loss = ((model(x).squeeze(1) - x.sum(dim=1)) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    if dist.is_initialized():  # ranks see the same batch: the averaged gradient is the one-rank gradient
        for p in model.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad)
                p.grad /= dist.get_world_size()
    opt.step()
    print(f"step {step} loss {loss.item():.6f}", flush=True)
    rankzero.log(step, {"loss": loss.item()})  # a sweep of it judges by this
    rankzero.progress(step, args.steps)
    if rank == 0:
        with open("plots/loss.txt", "a") as fh:
            fh.write(f"{step} {loss.item():.9e}\n")
    if step % 2 == 0:
        rankzero.save_checkpoint({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, step)
    if step == args.wait_after and start == 0:
        print("waiting", flush=True)
        while True:
            time.sleep(0.2)

if rank == 0:
    Path("model").mkdir(exist_ok=True)
    weights = torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()
    Path("model/weights.txt").write_text(" ".join(f"{w:.9e}" for w in weights) + "\n")
