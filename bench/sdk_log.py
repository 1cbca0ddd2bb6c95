"""`rankzero.log` every step: a tiny 2-rank DDP loop with and without it, steps/s side by side.

    .venv/bin/python bench/sdk_log.py [--rounds 3] [--steps 5200] [--warmup 200] [--full]

One hand-written DDP loop (TensorDataset + DistributedSampler + DataLoader, DDP(MLP), SGD) under
torchrun with 2 ranks, gloo, on CPU (OMP_NUM_THREADS=1 each), RANKZERO_RUN_DIR set to a fresh run
dir. After `warmup` steps, blocks of 50 steps take turns within the same run: "bare" (the loop
alone), "log" (+ `rankzero.log(step, {"train/loss": loss})` every step: a tensor, averaged across
the ranks, a metric event per step on rank 0), "control" (the bare loop again: its ratio to bare is
the noise floor of this machine) and, with `--full`, "full" (+ `rankzero.progress` and
`rankzero.should_stop` every step too). Taking turns inside one run compares neighbouring blocks,
so a busy machine's drift hits every variant alike. Rank 0 times each block (wall clock, and its
process's CPU time); the bench checks that every logged step's metric event was written. Prints a
table: per round the median block rate of each variant and the median over cycles of each
variant's rate relative to the bare block of its cycle (target ≥ 0.98).
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
CHUNK = 50  # steps per timing block


def worker(variants: list[str], steps: int, warmup: int, result_path: str) -> None:
    """The DDP loop (runs under torchrun). After `warmup` steps, blocks of CHUNK steps take turns
    through `variants` (bare: the loop alone; log: + rankzero.log; full: + progress, should_stop);
    rank 0 records each block's wall and CPU time. Every rank picks the same variant per block."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    import rankzero

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(NUM_SAMPLES, FEATURES, generator=gen)
    y = (x @ torch.randn(FEATURES, CLASSES, generator=gen)).argmax(dim=1)
    dataset = TensorDataset(x, y)
    sampler = DistributedSampler(dataset, shuffle=True, seed=0, drop_last=True)
    loader = DataLoader(dataset, batch_size=BATCH, sampler=sampler, drop_last=True)
    model = DDP(nn.Sequential(nn.Flatten(), nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    step, epoch, blocks = 0, 0, []
    mark = (time.perf_counter(), time.process_time())
    variant = "bare"
    while step < steps:
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            optimizer.step()
            step += 1
            if variant != "bare":
                rankzero.log(step, {"train/loss": loss})
            if variant == "full":
                rankzero.progress(step, steps, samples=step * BATCH * 2)
                rankzero.should_stop()
            if step % CHUNK == 0:
                now = (time.perf_counter(), time.process_time())
                if step > warmup:
                    blocks.append({"variant": variant, "wall": now[0] - mark[0], "cpu": now[1] - mark[1]})
                mark, variant = now, variants[(step // CHUNK) % len(variants)]
            if step == steps:
                break
        epoch += 1
    if dist.get_rank() == 0:
        Path(result_path).write_text(json.dumps(blocks))
    dist.destroy_process_group()


def _round(blocks: list[dict], variants: list[str]) -> dict[str, dict[str, float]]:
    """Per variant: median steps/s and steps/CPU-s over its blocks, and the median over each cycle of
    blocks of its rate divided by the bare block's rate in that same cycle (neighbours in time)."""
    out: dict[str, dict[str, float]] = {}
    cycles = [blocks[i : i + len(variants)] for i in range(0, len(blocks) - len(variants) + 1, len(variants))]
    for v in variants:
        mine = [b for b in blocks if b["variant"] == v]
        out[v] = {k: statistics.median(CHUNK / b[k] for b in mine) for k in ("wall", "cpu")}
        for k in ("wall", "cpu"):
            ratios = []
            for cycle in cycles:
                by = {b["variant"]: b[k] for b in cycle}
                if v in by and "bare" in by:
                    ratios.append(by["bare"] / by[v])
            out[v][f"{k}_ratio"] = statistics.median(ratios)
    return out


def run_round(work: Path, variants: list[str], steps: int, warmup: int) -> dict[str, dict[str, float]]:
    run_dir, result = work / f"run_{time.monotonic_ns()}", work / "blocks.json"
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(REPO))
    env["RANKZERO_RUN_DIR"] = str(run_dir)
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    cmd += [str(Path(__file__).resolve()), "--worker", ",".join(variants), "--steps", str(steps)]
    done = subprocess.run([*cmd, "--warmup", str(warmup), "--result", str(result)], cwd=REPO, env=env, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"torchrun exited {done.returncode}")
    blocks = json.loads(result.read_text())
    logged = sum(CHUNK for b in blocks if b["variant"] in ("log", "full"))
    metrics = sum('"metric"' in line for line in (run_dir / "events.jsonl").read_text().splitlines())
    assert metrics >= logged, f"{metrics} metric events for {logged} logged steps"  # they really were written
    return _round(blocks, variants)


def _table(rows: list[dict[str, dict[str, float]]], variants: list[str]) -> None:
    others = variants[1:]
    head = ["round"] + [f"{v} steps/s" for v in variants] + [f"{v}/bare" for v in others]
    head += [f"{v} steps/CPU-s" for v in variants] + [f"{v}/bare (CPU)" for v in others]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    keys = ("wall", "cpu", "wall_ratio", "cpu_ratio")
    med = {v: {k: statistics.median(r[v][k] for r in rows) for k in keys} for v in variants}
    for label, row in [*((str(i + 1), r) for i, r in enumerate(rows)), ("median", med)]:
        cells = [label] + [f"{row[v]['wall']:,.0f}" for v in variants]
        cells += [f"{row[v]['wall_ratio']:.3f}" for v in others]
        cells += [f"{row[v]['cpu']:,.0f}" for v in variants]
        cells += [f"{row[v]['cpu_ratio']:.3f}" for v in others]
        print("| " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5200)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--full", action="store_true", help="also time log + progress + should_stop every step")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker.split(","), args.steps, args.warmup, args.result)
        return
    variants = ["bare", "log", "control", "full"] if args.full else ["bare", "log", "control"]
    if args.warmup % CHUNK or args.steps % CHUNK or (args.steps - args.warmup) // CHUNK < 2 * len(variants):
        parser.error(f"--warmup and --steps must be multiples of {CHUNK}, with two blocks per variant between them")
    rows = []
    with tempfile.TemporaryDirectory(prefix="rankzero-bench-") as tmp:
        for r in range(args.rounds):
            rows.append(run_round(Path(tmp), variants, args.steps, args.warmup))
            print(f"round {r + 1}: {rows[-1]}", file=sys.stderr, flush=True)
    print(
        f"\nDDP MLP {FEATURES}-{HIDDEN}-{CLASSES}, batch {BATCH}/rank, 2 ranks, gloo, CPU; steps {args.warmup}.."
        f"{args.steps} in blocks of {CHUNK} taking turns ({', '.join(variants)}) within each run\n"
    )
    _table(rows, variants)
    print("\nsteps/s: median block of the variant (wall clock, rank 0); steps/CPU-s: the same blocks per CPU-second")
    print("of rank 0's process. v/bare: median over the cycles of blocks of (bare block time / v block time),")
    print("i.e. neighbouring blocks of one run compared, which cancels most of a busy machine's drift. Target ≥ 0.98;")
    print("control runs exactly the bare loop: how far its ratio strays from 1 is the noise of the measurement.")


if __name__ == "__main__":
    main()
