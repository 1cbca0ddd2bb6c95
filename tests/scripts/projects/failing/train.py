"""Rank 1 fails on its first batch (prints its traceback, exits 3); rank 0 waits in a collective."""

import sys
import traceback

import torch
import torch.distributed as dist


def load_batch(rank: int) -> torch.Tensor:
    if rank == 1:
        raise ValueError(f"bad batch on rank {rank}")
    return torch.ones(4)


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    try:
        batch = load_batch(rank)
    except ValueError:
        traceback.print_exc()
        sys.exit(3)
    dist.all_reduce(batch)  # rank 0 waits here until torchrun stops it


if __name__ == "__main__":
    main()
