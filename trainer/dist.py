"""Process-group setup: who am I (rank, world, device) and which backend talks between us."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from trainer.spec import JobSpec


@dataclass(frozen=True)
class DistContext:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str | None  # None: one process, no process group
    owns_group: bool  # we created the process group, so we destroy it

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def resolve_device(spec: JobSpec, local_rank: int) -> torch.device:
    if spec.device == "cpu" or (spec.device == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' was asked for but no GPU is visible; use device 'auto' or 'cpu'")
    if local_rank >= torch.cuda.device_count():
        raise RuntimeError(
            f"local rank {local_rank} has no GPU: {torch.cuda.device_count()} visible; lower nproc to the GPU count"
        )
    return torch.device("cuda", local_rank)


def setup(spec: JobSpec) -> DistContext:
    """Join (or reuse) the process group torchrun prepared and check it matches the spec."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if world_size != spec.world_size:
        raise ValueError(
            f"the spec asks for nproc × nnodes = {spec.world_size} processes but {world_size} were started; "
            f"launch with torchrun --nproc_per_node={spec.nproc} (or python -m trainer for one process)"
        )
    device = resolve_device(spec, local_rank)
    if spec.sync == "dataparallel" and (device.type != "cuda" or torch.cuda.device_count() < 2):
        raise ValueError(
            "sync 'dataparallel' needs a CUDA host with at least 2 visible GPUs "
            f"(found {torch.cuda.device_count() if torch.cuda.is_available() else 0}); "
            "use sync 'ddp' (with nproc = GPU count) or a single process instead"
        )
    if spec.sync_batchnorm and device.type != "cuda":
        raise ValueError("sync_batchnorm needs CUDA (PyTorch's SyncBatchNorm has no CPU kernel); turn it off on CPU")
    if spec.precision == "fp16" and device.type != "cuda":
        raise ValueError("precision fp16 needs CUDA (GradScaler); use bf16 or fp32 on CPU")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if world_size == 1:
        return DistContext(0, 1, 0, device, None, owns_group=False)
    backend = "nccl" if device.type == "cuda" else "gloo"
    owns = not dist.is_initialized()
    if owns:
        device_id = device if device.type == "cuda" else None
        dist.init_process_group(backend=backend, timeout=timedelta(minutes=10), device_id=device_id)
    return DistContext(rank, world_size, local_rank, device, dist.get_backend(), owns_group=owns)


def teardown(ctx: DistContext) -> None:
    if ctx.owns_group and dist.is_initialized():
        dist.destroy_process_group()


def barrier(ctx: DistContext) -> None:
    if ctx.distributed:
        dist.barrier()
