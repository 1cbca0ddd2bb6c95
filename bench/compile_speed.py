"""`compile: true` vs eager: steady-state speed on CPU, what compiling costs, and when it pays.

    .venv/bin/python bench/compile_speed.py [--blocks 12] [--models convnet resnet18]
    .venv/bin/python bench/compile_speed.py --trainer-runs [--rounds 2] [--steps 120] [--warmup 40]

Default (interleaved, robust on a busy machine): one process per model builds it twice from the
trainer's registry with the same weights, compiles one copy (torch.compile, inductor, cold cache in a
temporary folder), and trains both on the same batch (FakeData-like 3×32×32, batch 32, SGD with
momentum, fp32, 1 thread) in alternating blocks of 5 steps; a neighbour's burst then hits both
alike. It prints the median block time of each, the speed-up, the compile cost (first compiled step −
first eager step) and the break-even step count.

`--trainer-runs`: each model trains through `python -m trainer` (one process, CPU,
OMP_NUM_THREADS=1, FakeData 3×32×32, batch 32, SGD with momentum, fp32), eager and compiled
alternately in each round. Per run:

* steady samples/s: the median of the `progress` windows (every 20 steps) after `--warmup` steps;
* first step: the first progress event's `first_step_s` (seconds from process start to the end of
  step 1, which for the compiled run includes tracing and inductor's C++ compile); a second
  compiled run would find the kernels in its run dir's cache, the bench starts each one cold.

The table gives the speed-up (compiled / eager samples/s), the compile cost (first step compiled −
eager) and the break-even: the number of steps after which the compiled run is ahead
(compile cost / time saved per step); a job shorter than that is faster eager.
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
LOG_EVERY, BATCH = 20, 32
MODELS = {
    "convnet": {"name": "convnet", "args": {"in_channels": 3, "num_classes": 10}},
    "resnet18": {"name": "resnet18", "args": {"num_classes": 10}},
}


def spec(model: str, steps: int, compiled: bool) -> dict:
    return {
        "name": "compile",
        "model": MODELS[model],
        "data": {"name": "fake", "args": {"num_samples": 8192, "image_size": [3, 32, 32]}, "val_fraction": 0.0},
        "optimizer": {"name": "sgd", "lr": 0.01, "momentum": 0.9},
        "batch_size": BATCH,
        "device": "cpu",
        "max_steps": steps,
        "log_every": LOG_EVERY,
        "compile": compiled,
        "checkpoint": {"every_steps": None, "every_epochs": None, "keep_last": 1},
    }


def run(work: Path, model: str, steps: int, warmup: int, compiled: bool) -> dict[str, float]:
    run_dir = work / f"run_{time.monotonic_ns()}"
    spec_path = work / f"spec_{time.monotonic_ns()}.json"
    spec_path.write_text(json.dumps(spec(model, steps, compiled)))
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(REPO))
    for name in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        env.pop(name, None)  # each run's own (cold) cache in its run dir
    cmd = [sys.executable, "-m", "trainer", "--spec", str(spec_path), "--run-dir", str(run_dir)]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    progress = [e for e in events if e["type"] == "progress"]
    if "ignored" in done.stderr and compiled:
        print(done.stderr.strip().splitlines()[-1], file=sys.stderr)
    subprocess.run(["rm", "-rf", str(run_dir)], check=False)
    windows = [
        LOG_EVERY * BATCH / (b["time"] - a["time"])
        for a, b in zip(progress, progress[1:], strict=False)
        if a["step"] >= warmup
    ]
    return {"samples_per_s": statistics.median(windows), "first_step": progress[0]["first_step_s"]}


BLOCK = 5  # steps per block in the interleaved measurement


def interleaved_worker(model_name: str, blocks: int, result_path: str) -> None:
    """Eager and compiled copies of one model, trained in alternating blocks (runs in its own process)."""
    import copy

    import torch
    import torch.nn.functional as F

    from trainer.models import BUILDERS

    torch.set_num_threads(1)
    torch.manual_seed(0)
    eager = BUILDERS[model_name](**MODELS[model_name]["args"])
    compiled_module = copy.deepcopy(eager)
    compiled = torch.compile(compiled_module)
    x, y = torch.randn(BATCH, 3, 32, 32), torch.randint(0, 10, (BATCH,))
    runs = {
        "eager": (eager, torch.optim.SGD(eager.parameters(), lr=0.01, momentum=0.9)),
        "compiled": (compiled, torch.optim.SGD(compiled_module.parameters(), lr=0.01, momentum=0.9)),
    }
    losses: dict[str, list[float]] = {"eager": [], "compiled": []}

    def step(name: str) -> None:
        model, opt = runs[name]
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses[name].append(loss.item())

    first = {}
    for name in runs:  # the first step: compiling for the compiled copy
        t0 = time.perf_counter()
        step(name)
        first[name] = time.perf_counter() - t0
    for name in runs:  # warm-up
        for _ in range(BLOCK):
            step(name)
    times: dict[str, list[float]] = {"eager": [], "compiled": []}
    for b in range(blocks):
        for name in runs if b % 2 == 0 else list(runs)[::-1]:
            t0 = time.perf_counter()
            for _ in range(BLOCK):
                step(name)
            times[name].append((time.perf_counter() - t0) / BLOCK)
    Path(result_path).write_text(json.dumps({"first": first, "times": times, "losses": losses}))


def interleaved(models: list[str], blocks: int) -> None:
    rows = []
    with tempfile.TemporaryDirectory(prefix="rankzero-bench-") as tmp:
        for model in models:
            result = Path(tmp) / f"{model}.json"
            env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(REPO))
            env["TORCHINDUCTOR_CACHE_DIR"] = str(Path(tmp) / f"inductor_{model}")  # cold
            cmd = [sys.executable, str(Path(__file__).resolve()), "--interleaved-worker", model]
            cmd += ["--blocks", str(blocks), "--result", str(result)]
            done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=3600)
            if done.returncode != 0:
                raise RuntimeError(f"{model}: {done.stdout[-2000:]}\n{done.stderr[-3000:]}")
            r = json.loads(result.read_text())
            rows.append((model, r))
            print(f"{model}: {statistics.median(r['times']['eager']):.4f} s/step eager, "
                  f"{statistics.median(r['times']['compiled']):.4f} compiled", file=sys.stderr)  # fmt: skip
    print(
        f"\nCPU, 1 thread, 3×32×32, batch {BATCH}, SGD+momentum, fp32; {blocks} alternating blocks of {BLOCK} steps\n"
    )
    print("| model | eager s/step | compiled s/step | speed-up | compile cost s | break-even steps |")
    print("|---|---|---|---|---|---|")
    for model, r in rows:
        e, c = statistics.median(r["times"]["eager"]), statistics.median(r["times"]["compiled"])
        cost = r["first"]["compiled"] - r["first"]["eager"]
        even = f"{cost / (e - c):,.0f}" if e > c else "never (compiled is not faster)"
        print(f"| {model} | {e:.4f} | {c:.4f} | {e / c:.2f}× | {cost:.1f} | {even} |")
    print("\nmedian block time per step; compile cost = first compiled step − first eager step (cold cache);")
    print("break-even = compile cost / seconds saved per step: a shorter job is faster eager.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trainer-runs", action="store_true", help="measure through `python -m trainer` runs")
    parser.add_argument("--blocks", type=int, default=12)
    parser.add_argument("--interleaved-worker", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--warmup", type=int, default=40)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    args = parser.parse_args()
    if args.interleaved_worker:
        interleaved_worker(args.interleaved_worker, args.blocks, args.result)
        return
    if not args.trainer_runs:
        interleaved(args.models, args.blocks)
        return
    if args.warmup % LOG_EVERY or args.steps - args.warmup < 2 * LOG_EVERY:
        parser.error(f"--warmup must be a multiple of {LOG_EVERY}, at least {2 * LOG_EVERY} steps before --steps")
    results: dict[str, list[dict[str, dict[str, float]]]] = {m: [] for m in args.models}
    with tempfile.TemporaryDirectory(prefix="rankzero-bench-") as tmp:
        for r in range(args.rounds):
            for model in args.models:
                order = [False, True] if r % 2 == 0 else [True, False]
                row = {("compiled" if c else "eager"): run(Path(tmp), model, args.steps, args.warmup, c) for c in order}
                results[model].append(row)
                print(f"round {r + 1} {model}: {row}", file=sys.stderr, flush=True)
    print(f"\nCPU, 1 thread, FakeData 3×32×32, batch {BATCH}, fp32; steady state = steps {args.warmup}..{args.steps}\n")
    print("| model | eager samples/s | compiled samples/s | speed-up | first step eager s | first step compiled s "
          "| compile cost s | break-even steps |")  # fmt: skip
    print("|---" * 8 + "|")
    for model, rows in results.items():
        e = statistics.median(r["eager"]["samples_per_s"] for r in rows)
        c = statistics.median(r["compiled"]["samples_per_s"] for r in rows)
        fe = statistics.median(r["eager"]["first_step"] for r in rows)
        fc = statistics.median(r["compiled"]["first_step"] for r in rows)
        saved_per_step = BATCH / e - BATCH / c
        even = f"{(fc - fe) / saved_per_step:,.0f}" if saved_per_step > 0 else "never (compiled is not faster)"
        print(f"| {model} | {e:,.0f} | {c:,.0f} | {c / e:.2f}× | {fe:.1f} | {fc:.1f} | {fc - fe:.1f} | {even} |")
    print("\nmedians over rounds; break-even = compile cost / seconds saved per step.")


if __name__ == "__main__":
    main()
