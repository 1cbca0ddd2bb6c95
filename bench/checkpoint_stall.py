"""Checkpoint stall: training time lost per checkpoint, saving on a background thread vs in the step.

    .venv/bin/python bench/checkpoint_stall.py [--rounds 3] [--steps 60] [--every 15] [--baseline-ref 27f5108]

resnet50 (torchvision, 10 classes) on FakeData 3×64×64, batch 2, SGD with momentum (a ~200 MB
checkpoint: weights + momentum), one process on CPU, OMP_NUM_THREADS=1, `python -m trainer` with
log_every 1. Three variants run alternately in each round:

* `none`:  the trainer with no checkpoint but the final one (after the measured window);
* `async`: this trainer, a checkpoint every `--every` steps (the step waits for a host snapshot,
  a background thread pickles, writes, fsyncs and renames);
* `sync`:  the trainer as committed at `--baseline-ref` (before async saving; the step waits while
  rank 0 pickles, writes and fsyncs), same spec.

From each run's `progress` events (one per step): the window from step 5 to the last step, which
holds the saves at every `--every` steps but not the final one. A run's excess = its window minus
as many of its own median step intervals (so a neighbour slowing the whole run cancels out);
`lost/ckpt` = (excess − the round's `none` excess) / saves: everything a save costs training,
including a background writer competing for the CPU. `step wait` = the step interval that holds a
save minus the run's median step interval (what the loop itself waited for). Medians over rounds.
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
FIRST = 5  # the window starts after this step (warm-up)


def spec(steps: int, every: int | None) -> dict:
    return {
        "name": "stall",
        "model": {"name": "resnet50", "args": {"num_classes": 10}},
        "data": {"name": "fake", "args": {"num_samples": 4096, "image_size": [3, 64, 64]}, "val_fraction": 0.0},
        "optimizer": {"name": "sgd", "lr": 0.01, "momentum": 0.9},
        "batch_size": 2,
        "device": "cpu",
        "max_steps": steps,
        "log_every": 1,
        "checkpoint": {"every_steps": every, "every_epochs": None, "keep_last": 2},
    }


def run(work: Path, code_root: Path, steps: int, every: int | None) -> dict[str, float]:
    run_dir = work / f"run_{time.monotonic_ns()}"
    spec_path = work / f"spec_{time.monotonic_ns()}.json"
    spec_path.write_text(json.dumps(spec(steps, every)))
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(code_root))
    cmd = [sys.executable, "-m", "trainer", "--spec", str(spec_path), "--run-dir", str(run_dir)]
    done = subprocess.run(cmd, cwd=code_root, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    at = {e["step"]: e["time"] for e in events if e["type"] == "progress"}
    saves = list(range(every, steps, every)) if every else []
    gaps = {s: at[s + 1] - at[s] for s in range(FIRST, steps)}
    plain = statistics.median(g for s, g in gaps.items() if s not in saves)
    size = max((e["bytes"] for e in events if e["type"] == "checkpoint"), default=0)
    subprocess.run(["rm", "-rf", str(run_dir)], check=False)
    return {
        "window": at[steps] - at[FIRST],
        "excess": sum(gaps.values()) - plain * len(gaps),  # the window minus as many median steps
        "saves": len(saves),
        "step_wait": statistics.median(gaps[s] - plain for s in saves) if saves else 0.0,
        "step": plain,
        "mb": size / 1e6,
    }


def _baseline_tree(ref: str, into: Path) -> Path:
    into.mkdir()
    archive = subprocess.run(["git", "archive", ref, "trainer"], cwd=REPO, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--every", type=int, default=15)
    parser.add_argument("--baseline-ref", default="27f5108", help="the trainer before async saving")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="rankzero-bench-", dir=os.environ.get("BENCH_DIR")) as tmp:
        work = Path(tmp)
        base = _baseline_tree(args.baseline_ref, work / "base")
        variants = {
            "none": (REPO, None),
            "async": (REPO, args.every),
            "sync": (base, args.every),
        }
        for r in range(args.rounds):
            order = list(variants) if r % 2 == 0 else list(variants)[::-1]
            row = {}
            for name in order:
                code_root, every = variants[name]
                row[name] = run(work, code_root, args.steps, every)
            rows.append(row)
            print(f"round {r + 1}: " + ", ".join(f"{k} {v['window']:.1f} s" for k, v in row.items()), file=sys.stderr)
    print(f"\nresnet50, FakeData 3×64×64, batch 2, SGD+momentum, CPU, 1 thread; steps {FIRST}..{args.steps}, ")
    size = rows[0]["async"]["mb"]
    print(f"a checkpoint every {args.every} steps ({size:.0f} MB); runs dir {tempfile.gettempdir()}\n")
    print("| round | none window s | async window s | sync window s | async lost/ckpt s | sync lost/ckpt s "
          "| async step wait s | sync step wait s | step s |")  # fmt: skip
    print("|---" * 9 + "|")
    lost = {"async": [], "sync": []}
    for i, row in enumerate(rows, 1):
        for k in lost:
            lost[k].append((row[k]["excess"] - row["none"]["excess"]) / row[k]["saves"])
        print(
            f"| {i} | {row['none']['window']:.1f} | {row['async']['window']:.1f} | {row['sync']['window']:.1f} "
            f"| {lost['async'][-1]:.2f} | {lost['sync'][-1]:.2f} | {row['async']['step_wait']:.2f} "
            f"| {row['sync']['step_wait']:.2f} | {row['none']['step']:.3f} |"
        )
    med = {k: statistics.median(v) for k, v in lost.items()}
    wait = {k: statistics.median(row[k]["step_wait"] for row in rows) for k in ("async", "sync")}
    print(
        f"| median | | | | {med['async']:.2f} | {med['sync']:.2f} | {wait['async']:.2f} | {wait['sync']:.2f} "
        f"| {statistics.median(row['none']['step'] for row in rows):.3f} |"
    )
    print("\nlost/ckpt: (excess − the round's `none` excess) / saves, excess = window − steps × the run's")
    print("median step — all a save costs, a background writer's CPU included; step wait: the step")
    print("holding a save minus the run's median step (what the training loop itself waited for).")


if __name__ == "__main__":
    main()
