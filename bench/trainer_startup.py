"""Start-up: launch → first optimizer step, `torchrun -m trainer` vs a bare hand-written torchrun DDP loop.

    .venv/bin/python bench/trainer_startup.py [--rounds 5] [--baseline-ref REF]

The README example's workload: MLP on scikit-learn's digits, 2 ranks, gloo, CPU (OMP_NUM_THREADS=1
each). Each run is timed from just before `torchrun` is started to rank 0's first optimizer step:
for the trainer the `time` of its step-1 `progress` event (log_every 1), for the bare loop the time
it writes right after its first `optimizer.step()`. Runs alternate (trainer / bare / [baseline] / …)
so drifting load hits all alike; the table shows each round and the medians, and the trainer's
own per-phase stamps (the `startup` key of its `started` event: seconds since process start).

`--baseline-ref REF` also runs the trainer as committed at REF (`git archive REF trainer`, e.g. the
commit before the start-up work) in the same rounds, so before / after come from one invocation.

The bare loop is what a user writes by hand: `sklearn.datasets.load_digits`, TensorDataset +
DistributedSampler + DataLoader, DDP(MLP), SGD.
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
PHASES = ("imports", "rendezvous", "data", "build", "first_step")


def bare_worker(result_path: str) -> None:
    """The hand-written DDP loop (runs under torchrun): digits, MLP 64-128-10, SGD, batch 32/rank."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from sklearn.datasets import load_digits
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    dist.init_process_group("gloo")
    d = load_digits()
    x = torch.tensor(d.data, dtype=torch.float32) / 16.0
    dataset = TensorDataset(x, torch.tensor(d.target, dtype=torch.long))
    sampler = DistributedSampler(dataset, shuffle=True, seed=0, drop_last=True)
    loader = DataLoader(dataset, batch_size=32, sampler=sampler, drop_last=True)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Flatten(), nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for step, (xb, yb) in enumerate(loader):
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(xb), yb).backward()
        optimizer.step()
        if step == 0 and dist.get_rank() == 0:
            Path(result_path).write_text(json.dumps({"first_step": time.time()}))
        if step == 2:
            break
    dist.destroy_process_group()


def trainer_spec() -> dict:
    return {
        "name": "startup",
        "model": {"name": "mlp"},
        "data": {"name": "digits"},
        "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9},
        "batch_size": 32,
        "nproc": 2,
        "device": "cpu",
        "max_steps": 3,
        "log_every": 1,
        "checkpoint": {"every_steps": None, "every_epochs": None, "keep_last": 1},
    }


def _env(pythonpath: Path) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONPATH=str(pythonpath))
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    return env


def _torchrun(args: list[str], pythonpath: Path) -> float:
    """Run torchrun (2 ranks); returns the unix time just before it was started."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", *args]
    t0 = time.time()
    done = subprocess.run(cmd, cwd=pythonpath, env=_env(pythonpath), capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return t0


def run_trainer(work: Path, code_root: Path) -> dict[str, float]:
    spec_path, run_dir = work / "spec.json", work / f"run_{time.monotonic_ns()}"
    spec_path.write_text(json.dumps(trainer_spec()))
    t0 = _torchrun(["-m", "trainer", "--spec", str(spec_path), "--run-dir", str(run_dir)], code_root)
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    first = next(e for e in events if e["type"] == "progress" and e["step"] == 1)
    started = next(e for e in events if e["type"] == "started")
    stamps = dict(started.get("startup", {}))
    if "first_step_s" in first:
        stamps["first_step"] = first["first_step_s"]
    return {"launch": first["time"] - t0, **stamps}


def run_bare(work: Path) -> dict[str, float]:
    result = work / "bare.json"
    t0 = _torchrun([str(Path(__file__).resolve()), "--bare-worker", "--result", str(result)], REPO)
    return {"launch": json.loads(result.read_text())["first_step"] - t0}


def _baseline_tree(ref: str, into: Path) -> Path:
    """The trainer package as committed at `ref`, alone in a folder of its own."""
    archive = subprocess.run(["git", "archive", ref, "trainer"], cwd=REPO, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline-ref", help="also run the trainer as committed at this git ref")
    parser.add_argument("--bare-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare_worker:
        bare_worker(args.result)
        return
    kinds = ["trainer", "bare"] + (["baseline"] if args.baseline_ref else [])
    rows: list[dict[str, dict[str, float]]] = []
    with tempfile.TemporaryDirectory(prefix="rankzero-bench-") as tmp:
        work = Path(tmp)
        base = None
        if args.baseline_ref:
            (work / "base").mkdir()
            base = _baseline_tree(args.baseline_ref, (work / "base").resolve())
        for r in range(args.rounds):
            row = {}
            for kind in kinds if r % 2 == 0 else kinds[::-1]:
                if kind == "bare":
                    row[kind] = run_bare(work)
                else:
                    row[kind] = run_trainer(work, REPO if kind == "trainer" else base)  # type: ignore[arg-type]
            rows.append(row)
            note = ", ".join(f"{k} {v['launch']:.2f} s" for k, v in row.items())
            print(f"round {r + 1}: {note}", file=sys.stderr, flush=True)
    _table(rows, kinds)


def _median(rows: list[dict[str, dict[str, float]]], value) -> float:
    return statistics.median(value(row) for row in rows)


def _table(rows: list[dict[str, dict[str, float]]], kinds: list[str]) -> None:
    base = "baseline" in kinds
    print("\nlaunch → first optimizer step (s), `torchrun -m trainer` (mlp, digits, 2 ranks, gloo, CPU)\n")
    print("| round | " + " | ".join(kinds) + " | trainer − bare |" + (" baseline − bare |" if base else ""))
    print("|---" * (len(kinds) + 2 + base) + "|")
    for i, row in enumerate([*rows, None], 1):
        if row is None:
            cells = [f"{_median(rows, lambda r, k=k: r[k]['launch']):.2f}" for k in kinds]
            gaps = [_median(rows, lambda r, k=k: r[k]["launch"] - r["bare"]["launch"]) for k in kinds if k != "bare"]
            label = "median"
        else:
            cells = [f"{row[k]['launch']:.2f}" for k in kinds]
            gaps = [row[k]["launch"] - row["bare"]["launch"] for k in kinds if k != "bare"]
            label = str(i)
        print(f"| {label} | " + " | ".join(cells) + " | " + " | ".join(f"{g:+.2f}" for g in gaps) + " |")
    stamped = [row["trainer"] for row in rows if "imports" in row["trainer"]]
    if stamped:
        print("\ntrainer's own stamps, rank 0, seconds since its process started (median of rounds):\n")
        print("| " + " | ".join(PHASES) + " |\n" + "|---" * len(PHASES) + "|")
        meds = [_median(stamped, lambda s, p=p: s.get(p, float("nan"))) for p in PHASES]
        print("| " + " | ".join(f"{m:.2f}" for m in meds) + " |")
    print("\nlaunch: from starting torchrun to rank 0's first optimizer step (the trainer's step-1 progress")
    print("event, the bare loop's own stamp); stamps: the `started` event's `startup` and the first")
    print("progress event's `first_step_s` (torchrun's own start-up comes before a rank's process exists).")


if __name__ == "__main__":
    main()
