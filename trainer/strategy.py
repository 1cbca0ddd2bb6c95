"""How gradients are shared, chosen from the spec's knobs (nproc, accumulation_steps, sync).

* one process: the bare module (accumulation just sums micro-batch gradients);
* sync 'ddp', nproc > 1: DistributedDataParallel; on all micro-steps but the last, `no_sync()` skips
  the gradient all-reduce (the buckets are reduced once, after the last micro-batch's backward);
* sync 'manual': no wrapper — parameters are broadcast from rank 0 and checked identical at start,
  then the gradients are all-reduced (one flat buffer) and averaged once per optimizer step;
* sync 'dataparallel': nn.DataParallel over every visible GPU in one process.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import sys
from typing import cast

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from trainer.dist import DistContext
from trainer.run_dir import RunDir
from trainer.spec import JobSpec


class Strategy:
    """Holds the wrapped model (what the loss calls) and the unwrapped one (what checkpoints hold)."""

    name = "single"

    def __init__(self, module: nn.Module) -> None:
        self.module = module
        self.model: nn.Module = module

    def micro_step(self, last: bool) -> contextlib.AbstractContextManager:
        """Context for one micro-batch's forward and backward; `last` is the optimizer step's last one."""
        return contextlib.nullcontext()

    def sync_gradients(self) -> None:
        """Called once per optimizer step, after the last backward, before unscale/clip/step."""


class DDPStrategy(Strategy):
    name = "ddp"

    def __init__(self, module: nn.Module, ctx: DistContext) -> None:
        super().__init__(module)
        device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
        self.model = self.ddp = DDP(module, device_ids=device_ids)

    def micro_step(self, last: bool) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext() if last else self.ddp.no_sync()


class ManualStrategy(Strategy):
    name = "manual"

    def __init__(self, module: nn.Module, ctx: DistContext) -> None:
        super().__init__(module)
        self.world_size = ctx.world_size
        tensors = list(module.state_dict().values())
        for t in tensors:
            dist.broadcast(t, src=0)
        check_identical(tensors)
        self.params = [p for p in module.parameters() if p.requires_grad]

    def sync_gradients(self) -> None:
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        flat = torch.cat([g.reshape(-1) for g in grads])  # one collective instead of one per tensor
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        flat /= self.world_size
        offset = 0
        for p, g in zip(self.params, grads, strict=True):
            n = g.numel()
            p.grad = flat[offset : offset + n].view_as(p)
            offset += n


def check_identical(tensors: list[torch.Tensor]) -> None:
    """Raise unless every rank holds exactly the same values (elementwise max == min across ranks)."""
    floats = [t.detach().reshape(-1).double() for t in tensors if t.numel()]
    if not floats:
        return
    flat = torch.cat(floats)
    hi, lo = flat.clone(), flat.clone()
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    if not torch.equal(hi, lo):
        raise RuntimeError("sync 'manual': parameters differ across ranks after the broadcast from rank 0")


class DataParallelStrategy(Strategy):
    name = "dataparallel"

    def __init__(self, module: nn.Module, ctx: DistContext) -> None:
        super().__init__(module)
        self.model = nn.DataParallel(
            module, device_ids=list(range(torch.cuda.device_count())), output_device=ctx.device
        )


def build_strategy(spec: JobSpec, module: nn.Module, ctx: DistContext) -> Strategy:
    if spec.sync == "dataparallel":
        return DataParallelStrategy(module, ctx)
    if ctx.world_size == 1:
        return Strategy(module)
    if spec.sync == "manual":
        return ManualStrategy(module, ctx)
    if spec.sync_batchnorm:
        module = nn.SyncBatchNorm.convert_sync_batchnorm(module)
    return DDPStrategy(module, ctx)


def compile_missing(device: torch.device) -> str | None:
    """Why torch.compile's default backend (inductor) cannot build kernels here, or None if it can:
    on CPU it compiles C++ (needs a compiler), on CUDA it needs Triton."""
    if device.type == "cuda":
        return None if importlib.util.find_spec("triton") is not None else "the triton package is not installed"
    compilers = [os.environ.get("CXX"), "g++", "clang++", "c++"]
    if any(c and shutil.which(c) for c in compilers):
        return None
    return "no C++ compiler found (CXX, g++, clang++ or c++ on PATH)"


def compile_model(strategy: Strategy, run: RunDir, ctx: DistContext) -> bool:
    """`compile: true`: torch.compile what the loss calls (the DDP wrapper, so its optimizer splits the
    graph at bucket boundaries; checkpoints keep the plain module's names). Inductor's and Triton's
    caches go in the run dir (unless the environment names others), so a resumed attempt reuses them.
    Compilation itself happens in the first step. Returns False, saying why on stderr, when the host
    cannot compile: the run then trains eagerly rather than failing."""
    missing = compile_missing(ctx.device)
    if missing is not None:
        print(f"rankzero: compile: true ignored on this host, training eagerly: {missing}", file=sys.stderr, flush=True)
        return False
    if _inductor_cache_is_default():
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(run.compile_cache / "inductor")
    os.environ.setdefault("TRITON_CACHE_DIR", str(run.compile_cache / "triton"))
    # A module in, an OptimizedModule (an nn.Module) out; torch's annotation says only Callable.
    strategy.model = cast(nn.Module, torch.compile(strategy.model))
    return True


def _inductor_cache_is_default() -> bool:
    """TORCHINDUCTOR_CACHE_DIR is unset, or holds the default that inductor writes back into the
    environment the first time anything asks for it (importing torch._dynamo may) — not a choice."""
    current = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if not current:
        return True
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    except ImportError:  # another torch layout: treat a set value as chosen
        return False
    return os.path.abspath(current) == os.path.abspath(default_cache_dir())
