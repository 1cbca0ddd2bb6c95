"""A DDP script in the style of the PyTorch tutorials, knowing nothing of rankzero.

DistributedSampler with set_epoch, the loss reduced to rank 0 with dist.reduce, a rank-0
torch.save, and the checkpoint loaded back on every rank with map_location.
Run it by hand: `torchrun --nproc-per-node 2 train.py --epochs 2`.
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    x = torch.randn(512, 8)
    y = (x.sum(dim=1) > 0).long()
    dataset = TensorDataset(x, y)
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=32, sampler=sampler)
    model = DDP(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        total = torch.zeros(1)
        for xb, yb in loader:
            opt.zero_grad()
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            total += loss.detach()
        dist.reduce(total, dst=0)  # the sum over ranks lands on rank 0
        if rank == 0:
            print(f"epoch {epoch} loss {total.item() / (world * len(loader)):.4f}", flush=True)

    if rank == 0:
        torch.save({"model": model.module.state_dict(), "epochs": args.epochs}, "checkpoint.pt")
    dist.barrier()
    state = torch.load("checkpoint.pt", map_location="cpu")
    model.module.load_state_dict(state["model"])
    if rank == 0:
        print(f"checkpoint loaded back after {state['epochs']} epochs", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
