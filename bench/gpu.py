"""GPU benchmark, one command on any CUDA host: the trainer vs a bare loop, and the CUDA-only paths checked.

    .venv/bin/python bench/gpu.py [--steps 300] [--warmup 100] [--rounds 2]

Throughput (images/s, steady state; ratio = trainer / bare, alternating runs, medians over rounds):

* resnet18 (torchvision), bf16 autocast, 3×64×64 images held in memory, batch 128 per GPU;
* the MLP 64-512-10, fp32, batch 256 per GPU;

each on one GPU and on all visible GPUs (torchrun, one rank per GPU, NCCL). The trainer runs as
`torchrun -m trainer` does; the bare loop is the DDP tutorial's shape (TensorDataset +
DistributedSampler + DataLoader with pinned memory, DDP, SGD, autocast where the trainer has it).

Checks (a few steps each, exit code, finite loss and what the checkpoint holds): fp16 autocast +
GradScaler (1 GPU), SyncBatchNorm under DDP (needs 2 GPUs), DataParallel (needs 2 GPUs).

Without a GPU it prints `skipped: no CUDA device (torch.cuda.is_available() is False)` and exits 0.
`--smoke-cpu` runs the throughput part on CPU with gloo and tiny sizes (a check of the script itself,
not a benchmark).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SKIP_MESSAGE = "skipped: no CUDA device (torch.cuda.is_available() is False)"
IMAGE = (3, 64, 64)
WORKLOADS = {
    # name: (model spec, per-GPU batch, precision, data factory args)
    "resnet18 bf16": ({"name": "resnet18", "args": {"num_classes": 10}}, 128, "bf16", {"kind": "images"}),
    "mlp fp32": ({"name": "mlp", "args": {"in_features": 64, "hidden": 512}}, 256, "fp32", {"kind": "vectors"}),
}


# ------------------------------------------------------------------------------------------- data
def make_data(kind: str = "images", num_samples: int = 8192, image: list[int] | None = None):
    """The trainer's data factory (`bench.gpu:make_data`): seeded tensors held in memory, so the
    trainer's in-memory path serves them (one indexing op per batch) — as the bare loop's TensorDataset."""
    from trainer.data.datasets import TensorPairDataset

    x, y = tensors(kind, num_samples, image or list(IMAGE))
    return TensorPairDataset(x, y)


def tensors(kind: str, num_samples: int, image: list[int]):
    import torch

    gen = torch.Generator().manual_seed(0)
    shape = (num_samples, *image) if kind == "images" else (num_samples, 64)
    return torch.randn(*shape, generator=gen), torch.randint(0, 10, (num_samples,), generator=gen)


# ------------------------------------------------------------------------------------------ bare
def bare_worker(cfg: dict) -> None:
    """The hand-written loop (under torchrun): DDP when more than one rank, else the plain model."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    from trainer.models import BUILDERS

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    cuda = cfg["device"] == "cuda"
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if world > 1:
        dist.init_process_group("nccl" if cuda else "gloo")
    x, y = tensors(cfg["kind"], cfg["num_samples"], cfg["image"])
    dataset = TensorDataset(x, y)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=0, drop_last=True)
    loader = DataLoader(dataset, batch_size=cfg["batch"], sampler=sampler, drop_last=True, pin_memory=cuda)
    torch.manual_seed(0)
    model = BUILDERS[cfg["model"]["name"]](**cfg["model"]["args"]).to(device)
    if world > 1:
        model = DDP(model, device_ids=[local] if cuda else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    marks = _bare_loop(cfg, model, loader, sampler, optimizer, device)
    if rank == 0:
        per_window = cfg["log_every"] * cfg["batch"] * world
        rate = statistics.median(per_window / (b - a) for a, b in zip(marks, marks[1:], strict=False))
        Path(cfg["result"]).write_text(json.dumps({"images_per_s": rate}))
    if world > 1:
        dist.destroy_process_group()


def _bare_loop(cfg: dict, model, loader, sampler, optimizer, device) -> list[float]:
    """zero_grad / forward (autocast) / backward / step; a synchronised time mark every log_every steps."""
    import torch
    import torch.nn.functional as F

    dtype = torch.bfloat16 if cfg["precision"] == "bf16" else None
    step, epoch, marks = 0, 0, []
    while step < cfg["steps"]:
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            xb, yb = xb.to(device, non_blocking=True), yb.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
                loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            optimizer.step()
            step += 1
            if step >= cfg["warmup"] and step % cfg["log_every"] == 0:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                marks.append(time.perf_counter())
            if step == cfg["steps"]:
                break
        epoch += 1
    return marks


# -------------------------------------------------------------------------------------- launching
def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "4"))
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    return env


def _launch(nproc: int, args: list[str], timeout: float = 1800) -> subprocess.CompletedProcess:
    if nproc > 1:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", *args]
    else:
        cmd = [sys.executable, *args]
    return subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=timeout)


def _checked(done: subprocess.CompletedProcess, what: str) -> subprocess.CompletedProcess:
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


def trainer_spec(workload: str, cfg: dict, nproc: int, **extra) -> dict:
    model, batch, precision, data = WORKLOADS[workload]
    return {
        "name": "gpu-bench",
        "model": model,
        "data": {
            "name": "bench.gpu:make_data",
            "args": {**data, "num_samples": cfg["num_samples"], "image": cfg["image"]},
            "val_fraction": 0.0,
        },
        "optimizer": {"name": "sgd", "lr": 0.01, "momentum": 0.9},
        "batch_size": cfg.get("batch", batch),
        "nproc": nproc,
        "device": cfg["device"],
        "precision": precision,
        "max_steps": cfg["steps"],
        "log_every": cfg["log_every"],
        "checkpoint": {"every_steps": None, "every_epochs": None, "keep_last": 1},
        **extra,
    }


def run_trainer(work: Path, spec: dict) -> tuple[list[dict], Path]:
    run_dir = work / f"run_{time.monotonic_ns()}"
    spec_path = work / f"spec_{time.monotonic_ns()}.json"
    spec_path.write_text(json.dumps(spec))
    _checked(
        _launch(spec["nproc"], ["-m", "trainer", "--spec", str(spec_path), "--run-dir", str(run_dir)]),
        f"trainer ({spec['model']['name']}, nproc {spec['nproc']})",
    )
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()], run_dir


def trainer_rate(work: Path, workload: str, cfg: dict, nproc: int) -> float:
    events, _ = run_trainer(work, trainer_spec(workload, cfg, nproc))
    progress = [e for e in events if e["type"] == "progress" and e["step"] >= cfg["warmup"]]
    per_window = cfg["log_every"] * trainer_spec(workload, cfg, nproc)["batch_size"] * nproc
    return statistics.median(per_window / (b["time"] - a["time"]) for a, b in zip(progress, progress[1:], strict=False))


def bare_rate(work: Path, workload: str, cfg: dict, nproc: int) -> float:
    model, batch, precision, data = WORKLOADS[workload]
    result = work / "bare.json"
    bare = {**cfg, "model": model, "batch": cfg.get("batch", batch), "precision": precision, "kind": data["kind"]}
    bare["result"] = str(result)
    _checked(_launch(nproc, [str(Path(__file__).resolve()), "--bare-worker", json.dumps(bare)]), f"bare {workload}")
    return json.loads(result.read_text())["images_per_s"]


def throughput(work: Path, cfg: dict, gpu_counts: list[int], rounds: int) -> list[tuple[str, int, float, float]]:
    rows = []
    for workload in WORKLOADS:
        for n in gpu_counts:
            t, b = [], []
            for r in range(rounds):
                if r % 2 == 0:
                    t.append(trainer_rate(work, workload, cfg, n))
                    b.append(bare_rate(work, workload, cfg, n))
                else:
                    b.append(bare_rate(work, workload, cfg, n))
                    t.append(trainer_rate(work, workload, cfg, n))
                print(f"{workload} ×{n} round {r + 1}: trainer {t[-1]:,.0f}, bare {b[-1]:,.0f}", file=sys.stderr)
            rows.append((workload, n, statistics.median(t), statistics.median(b)))
    return rows


# ----------------------------------------------------------------------------------------- checks
def _finite_losses(events: list[dict]) -> bool:
    losses = [e["value"] for e in events if e["type"] == "metric" and e["name"] == "train/loss"]
    return bool(losses) and all(math.isfinite(v) for v in losses)


def check_run(work: Path, spec: dict, also) -> str:
    """Run a short job; 'ok: …' or 'FAILED: …' (never raises)."""
    try:
        events, run_dir = run_trainer(work, spec)
    except RuntimeError as exc:
        return f"FAILED: {str(exc).splitlines()[0]} … {str(exc)[-400:]}"
    if events[-1]["type"] != "finished" or not _finite_losses(events):
        return f"FAILED: ended with {events[-1]['type']}, losses finite: {_finite_losses(events)}"
    import torch

    ckpt = torch.load(sorted((run_dir / "checkpoints").glob("step_*.pt"))[-1], map_location="cpu", weights_only=True)
    return also(events, ckpt)


def checks(work: Path, cfg: dict, gpus: int) -> list[tuple[str, str]]:
    short = {**cfg, "steps": 20, "log_every": 5}
    out = []
    fp16 = trainer_spec("resnet18 bf16", {**short, "batch": 32}, 1, precision="fp16")
    out.append(
        (
            "fp16 + GradScaler, 1 GPU",
            check_run(
                work,
                fp16,
                lambda ev, ck: (
                    f"ok: 20 steps, final loss {_last_loss(ev):.3f}, scaler scale {ck['scaler'].get('scale')}"
                    if ck["scaler"].get("scale")
                    else "FAILED: the checkpoint holds no GradScaler state"
                ),
            ),
        )
    )
    if gpus < 2:
        out.append(("SyncBatchNorm, DDP", "not run: needs 2 GPUs (1 visible)"))
        out.append(("DataParallel", "not run: needs 2 GPUs (1 visible)"))
        return out
    conv = {"name": "convnet", "args": {"in_channels": 3, "num_classes": 10}}
    sbn = trainer_spec("resnet18 bf16", {**short, "batch": 32}, 2, sync_batchnorm=True, precision="fp32")
    sbn["model"] = conv
    out.append(
        (
            "SyncBatchNorm, DDP ×2",
            check_run(
                work,
                sbn,
                lambda ev, ck: (
                    f"ok: 20 steps, final loss {_last_loss(ev):.3f}, running mean kept"
                    if "features.1.running_mean" in ck["model"]
                    else "FAILED: no BatchNorm statistics in the checkpoint"
                ),
            ),
        )
    )
    dp = trainer_spec("resnet18 bf16", {**short, "batch": 64}, 1, sync="dataparallel", precision="fp32")
    dp["model"] = conv
    out.append(
        (
            f"DataParallel ×{gpus}",
            check_run(
                work,
                dp,
                lambda ev, ck: (
                    f"ok: 20 steps, final loss {_last_loss(ev):.3f}, checkpoint without 'module.' prefix"
                    if not any(k.startswith("module.") for k in ck["model"])
                    else "FAILED: the checkpoint holds the wrapper's names"
                ),
            ),
        )
    )
    return out


def _last_loss(events: list[dict]) -> float:
    return [e["value"] for e in events if e["type"] == "metric" and e["name"] == "train/loss"][-1]


# ------------------------------------------------------------------------------------------- main
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--smoke-cpu", action="store_true", help="run the throughput part on CPU, tiny (a self-check)")
    parser.add_argument("--bare-worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare_worker:
        bare_worker(json.loads(args.bare_worker))
        return 0
    import torch

    if not args.smoke_cpu and not torch.cuda.is_available():
        print(SKIP_MESSAGE)
        return 0
    cfg = {
        "device": "cpu" if args.smoke_cpu else "cuda",
        "steps": args.steps,
        "warmup": args.warmup,
        "log_every": 50,
        "num_samples": 8192,
        "image": list(IMAGE),
    }
    if args.smoke_cpu:
        cfg.update(steps=12, warmup=4, log_every=2, num_samples=256, image=[3, 16, 16], batch=4)
    gpus = 2 if args.smoke_cpu else torch.cuda.device_count()
    counts = [1] if gpus == 1 else [1, gpus]
    with tempfile.TemporaryDirectory(prefix="rankzero-gpu-bench-") as tmp:
        rows = throughput(Path(tmp), cfg, counts, 1 if args.smoke_cpu else args.rounds)
        checked = [] if args.smoke_cpu else checks(Path(tmp), cfg, gpus)
    where = "CPU smoke run (not a benchmark)" if args.smoke_cpu else f"{gpus} × {torch.cuda.get_device_name(0)}"
    print(f"\n{where}; torch {torch.__version__}; steps {cfg['warmup']}..{cfg['steps']}, medians of rounds\n")
    print("| workload | GPUs | trainer images/s | bare images/s | trainer / bare |")
    print("|---|---|---|---|---|")
    for workload, n, t, b in rows:
        print(f"| {workload} | {n} | {t:,.0f} | {b:,.0f} | {t / b:.3f} |")
    if gpus == 1:
        print("\n(one GPU visible: the all-GPUs rows equal the one-GPU rows and are not repeated)")
    if checked:
        print("\n| check | result |\n|---|---|")
        for name, result in checked:
            print(f"| {name} | {result} |")
    return 1 if any(r.startswith("FAILED") for _, r in checked) else 0


if __name__ == "__main__":
    sys.exit(main())
