"""Trainer overhead: the trainer vs a bare hand-written DDP loop on the same model, data and batch.

    .venv/bin/python bench/trainer_overhead.py [--rounds 3] [--steps 1200] [--warmup 200]

Both run under torchrun with 2 ranks, gloo, on CPU (OMP_NUM_THREADS=1 each), alternating
trainer / bare / trainer / bare ... in one invocation so drifting machine load hits both alike.
Steady-state samples/s is measured on rank 0 over windows of 100 steps between step `warmup` and
the last step — from the trainer's own `progress` events (their `time`), and with perf_counter in
the bare loop — and a run's rate is its median window. The same windows are also divided by rank
0's process CPU time (samples per CPU-second), which neighbours on a shared machine disturb far less.
The trainer runs exactly as `python -m trainer` does (same `train()`), with its progress events
also stamped with CPU time. Prints a table and the
ratio trainer / bare (target ≥ 0.98).

The bare loop is the PyTorch DDP tutorial's shape: TensorDataset + DistributedSampler + DataLoader,
DDP(model), SGD, zero_grad / forward / backward / step, nothing else.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FEATURES, HIDDEN, CLASSES = 64, 512, 10
NUM_SAMPLES, BATCH = 16_384, 64
CHUNK = 100  # steps per timing window; a run's rate is the median window (robust to a neighbour's burst)


def bare_worker(steps: int, warmup: int, result_path: str) -> None:
    """The hand-written DDP loop (runs under torchrun)."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(NUM_SAMPLES, FEATURES, generator=gen)
    y = (x @ torch.randn(FEATURES, CLASSES, generator=gen)).argmax(dim=1)
    dataset = TensorDataset(x, y)
    sampler = DistributedSampler(dataset, shuffle=True, seed=0, drop_last=True)
    loader = DataLoader(dataset, batch_size=BATCH, sampler=sampler, drop_last=True)
    model = DDP(nn.Sequential(nn.Flatten(), nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    step, epoch, marks = 0, 0, []
    while step < steps:
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            optimizer.step()
            step += 1
            if step >= warmup and step % CHUNK == 0:
                marks.append((time.perf_counter(), time.process_time()))
            if step == steps:
                break
        epoch += 1
    if rank == 0:
        Path(result_path).write_text(json.dumps(_rates([(i, w, c) for i, (w, c) in enumerate(marks)])))
    dist.destroy_process_group()


def _rates(marks: list[tuple[int, float, float]]) -> dict[str, float]:
    """Median over windows of samples per wall second and per CPU second of rank 0's process.
    marks: (window index or step, wall time, process CPU time), one per CHUNK steps."""
    per_chunk = CHUNK * BATCH * 2
    pairs = list(zip(marks, marks[1:], strict=False))
    return {
        "wall": statistics.median(per_chunk / (b[1] - a[1]) for a, b in pairs),
        "cpu": statistics.median(per_chunk / (b[2] - a[2]) for a, b in pairs),
    }


def trainer_worker(spec_path: str, run_dir: str) -> None:
    """The trainer (runs under torchrun): exactly `python -m trainer`, except that progress events
    also carry this process's CPU time, so the bench can normalise away a busy machine."""
    from trainer.event_types import EventType
    from trainer.events import EventLog
    from trainer.spec_file import load_spec
    from trainer.train import train

    emit = EventLog.emit

    def emit_with_cpu(self, type_, **fields):
        if type_ == EventType.progress:
            fields["cpu_s"] = time.process_time()
        emit(self, type_, **fields)

    EventLog.emit = emit_with_cpu
    train(load_spec(spec_path), run_dir)


def trainer_spec(steps: int, warmup: int) -> dict:
    return {
        "name": "bench",
        "model": {"name": "mlp", "args": {"in_features": FEATURES, "hidden": HIDDEN, "num_classes": CLASSES}},
        "data": {
            "name": "synthetic",
            "args": {"num_samples": NUM_SAMPLES, "num_features": FEATURES, "num_classes": CLASSES},
            "val_fraction": 0.0,
        },
        "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9},
        "batch_size": BATCH,
        "nproc": 2,
        "device": "cpu",
        "max_steps": steps,
        "log_every": CHUNK,  # one progress event per timing window
        "checkpoint": {"every_steps": None, "every_epochs": None, "keep_last": 1},
    }


def _env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(REPO))
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    return env


def _torchrun(*args: str) -> None:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", *args]
    done = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def run_trainer(work: Path, steps: int, warmup: int) -> dict[str, float]:
    spec_path, run_dir = work / "spec.json", work / f"run_{time.monotonic_ns()}"
    spec_path.write_text(json.dumps(trainer_spec(steps, warmup)))
    _torchrun(str(Path(__file__).resolve()), "--trainer-worker", "--spec", str(spec_path), "--run-dir", str(run_dir))
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    return _rates(
        [(e["step"], e["time"], e["cpu_s"]) for e in events if e["type"] == "progress" and e["step"] >= warmup]
    )


def run_bare(work: Path, steps: int, warmup: int) -> dict[str, float]:
    result = work / "bare.json"
    _torchrun(
        str(Path(__file__).resolve()),
        "--bare-worker",
        "--steps",
        str(steps),
        "--warmup",
        str(warmup),
        "--result",
        str(result),
    )
    return json.loads(result.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=1200)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--bare-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("--trainer-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    parser.add_argument("--run-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare_worker:
        bare_worker(args.steps, args.warmup, args.result)
        return
    if args.trainer_worker:
        trainer_worker(args.spec, args.run_dir)
        return
    if args.warmup % CHUNK or args.steps % CHUNK or args.steps - args.warmup < 2 * CHUNK:
        parser.error(f"--warmup and --steps must be multiples of {CHUNK}, at least {2 * CHUNK} steps apart")
    rows = []
    with tempfile.TemporaryDirectory(prefix="rankzero-bench-") as tmp:
        for r in range(args.rounds):
            trainer = run_trainer(Path(tmp), args.steps, args.warmup)
            bare = run_bare(Path(tmp), args.steps, args.warmup)
            rows.append((r + 1, trainer, bare))
            print(f"round {r + 1}: trainer {trainer}, bare {bare}", file=sys.stderr, flush=True)
    print(
        f"\nMLP {FEATURES}-{HIDDEN}-{CLASSES}, batch {BATCH}/rank, 2 ranks, gloo, CPU; "
        f"steps {args.warmup}..{args.steps}\n"
    )
    print("| round | trainer samples/s | bare samples/s | ratio | trainer samples/CPU-s | bare samples/CPU-s | ratio |")
    print("|---|---|---|---|---|---|---|")
    for r, t, b in rows:
        print(
            f"| {r} | {t['wall']:,.0f} | {b['wall']:,.0f} | {t['wall'] / b['wall']:.3f} "
            f"| {t['cpu']:,.0f} | {b['cpu']:,.0f} | {t['cpu'] / b['cpu']:.3f} |"
        )
    med = {
        k: (statistics.median(t[k] for _, t, _ in rows), statistics.median(b[k] for _, _, b in rows))
        for k in ("wall", "cpu")
    }
    (tw, bw), (tc, bc) = med["wall"], med["cpu"]
    print(f"| median | {tw:,.0f} | {bw:,.0f} | {tw / bw:.3f} | {tc:,.0f} | {bc:,.0f} | {tc / bc:.3f} |")
    print("\nsamples/s: steady state, median 100-step window of each run (wall clock, rank 0).")
    print("samples/CPU-s: the same windows divided by rank 0's process CPU time instead, which a busy")
    print("machine disturbs far less; ratio = trainer / bare.")


if __name__ == "__main__":
    main()
