"""A deterministic one-rank script that continues from `rankzero.load_checkpoint()`.

Trains a tiny linear model for --steps steps (a fixed batch per step, seeded by the step), saving a
checkpoint every 2 steps. With --wait-after N a run that starts from scratch stops training after step N
and waits (printing "waiting") until the job is stopped, exiting without saving, so the test can cancel
it there; a run that continues from a checkpoint (the same entrypoint) does not wait.
At the end it writes the weights to --out (the entrypoint passes ${RANKZERO_RUN_DIR}/final.txt).
Runs by hand too (no torchrun, no service): `python train.py --out final.txt`.
"""

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist

import rankzero

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=8)
parser.add_argument("--wait-after", type=int, default=0)
parser.add_argument("--out", required=True)
parser.add_argument("--job", default="-")
args = parser.parse_args()

if "WORLD_SIZE" in os.environ:
    dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
start = 0
state = rankzero.load_checkpoint()
if state is not None:
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    start = state["step"]
print(f"job {args.job} starts after step {start}", flush=True)

for step in range(start + 1, args.steps + 1):
    gen = torch.Generator().manual_seed(step)
    x = torch.randn(16, 4, generator=gen)
    loss = ((model(x).squeeze(1) - x.sum(dim=1)) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    rankzero.progress(step, args.steps)
    if step % 2 == 0:
        rankzero.save_checkpoint({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, step)
    if step == args.wait_after and start == 0:
        print("waiting", flush=True)
        while not rankzero.should_stop():
            time.sleep(0.1)
        sys.exit(rankzero.EXIT_STOPPED)

weights = torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()
with open(args.out, "w") as out:
    out.write(" ".join(f"{w:.9e}" for w in weights) + "\n")
