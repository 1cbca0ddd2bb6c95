"""What the worker costs while a 2-rank job runs (issue 29: ≤ 1 % of a core), beside the job's own CPU.

    .venv/bin/python bench/worker_cpu.py [--window-s 60] [--rounds 1] [--repo LABEL=PATH ...]

For each code tree (`--repo`; default: this checkout; e.g. `--repo base=/tmp/base --repo new=.` with
`git archive HEAD | tar -x -C /tmp/base`), alternating when `--rounds` > 1:

1. `rankzero up` (API + one worker, SQLite + the embedded broker, the real trainer) in a fresh data dir;
2. submit the issue's job: an MLP 784-512-512-10 on synthetic data, batch 64, 2 ranks on CPU (gloo),
   a progress event every 10 steps; wait for its first progress;
3. over `--window-s` seconds, user + system CPU from /proc of: the worker process itself (Celery, the
   supervision loop, ingest, the resource sampler, heartbeats: what this figure is about), the `up`
   process (the API), and everything under the worker (sandbox guard, torchrun's agent, the ranks);
4. cancel the job and stop.

CPU time, not wall time: neighbours on a shared machine slow both alike but add nothing to it.
Prints one table, one row per code tree.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from idle_cpu import TICK, Up, tree_ticks  # bench/ is not a package: beside this file

ROOT = Path(__file__).resolve().parents[1]
TERMINAL = ("succeeded", "failed", "cancelled")


def job_spec(max_steps: int) -> dict:
    return {
        "name": "worker-cpu-bench",
        "model": {"name": "mlp", "args": {"in_features": 784, "hidden": 512, "num_classes": 10}},
        "data": {
            "name": "synthetic",
            "args": {"num_samples": 16_384, "num_features": 784, "num_classes": 10},
            "val_fraction": 0.0,
        },
        "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9},
        "batch_size": 64,
        "nproc": 2,
        "device": "cpu",
        "max_steps": max_steps,
        "log_every": 10,
        "checkpoint": {"every_steps": None, "every_epochs": None, "keep_last": 1},
    }


def _own_ticks(pid: int) -> int:
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])


def _worker_pid(up_pid: int) -> int:
    """The worker: `up`'s child process (the API runs in `up` itself)."""
    kids = [p for p in tree_ticks(up_pid) if p != up_pid and _parent(p) == up_pid]
    if len(kids) != 1:
        raise RuntimeError(f"expected one worker under `rankzero up` ({up_pid}), found {kids}")
    return kids[0]


def _parent(pid: int) -> int:
    raw = Path(f"/proc/{pid}/stat").read_text()
    return int(raw[raw.rindex(")") + 2 :].split()[1])


def _wait_progress(up: Up, job_id: int, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = up.client.get(f"/jobs/{job_id}").json()
        if job["status"] in TERMINAL:
            raise RuntimeError(f"job {job_id} ended before the window: {job['status']} {job.get('error')}")
        if job["status"] == "running" and (job.get("step") or 0) > 0:
            return
        time.sleep(0.5)
    raise TimeoutError(f"job {job_id} made no progress in {timeout:.0f} s")


def measure(repo: Path, window_s: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="rankzero-worker-cpu-") as tmpdir:
        up = Up(repo, Path(tmpdir), trainer_module=None)
        try:
            up.wait_ready()
            worker = _worker_pid(up.proc.pid)
            r = up.client.post("/jobs", json=job_spec(max_steps=1_000_000))
            r.raise_for_status()
            job_id = r.json()["id"]
            _wait_progress(up, job_id)
            time.sleep(5)  # past the ranks' start
            tree0, up0, w0, t0 = tree_ticks(worker), _own_ticks(up.proc.pid), _own_ticks(worker), time.monotonic()
            time.sleep(window_s)
            tree1, up1, w1, t1 = tree_ticks(worker), _own_ticks(up.proc.pid), _own_ticks(worker), time.monotonic()
            job = up.client.get(f"/jobs/{job_id}").json()
            if job["status"] != "running":
                raise RuntimeError(f"job {job_id} left running during the window: {job['status']}")
            up.client.post(f"/jobs/{job_id}/cancel")
        finally:
            up.stop()
    seconds = t1 - t0
    below = sum(t - tree0.get(pid, 0) for pid, t in tree1.items() if pid != worker)

    def pct(ticks: float) -> float:
        return 100.0 * ticks / TICK / seconds

    return {"worker": pct(w1 - w0), "api": pct(up1 - up0), "job": pct(below)}


def main(argv: list[str]) -> dict[str, dict[str, list[float]]]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--window-s", type=float, default=60)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--repo", action="append", default=[], help="LABEL=PATH (repeatable); default: this checkout")
    args = p.parse_args(argv)
    repos = [tuple(r.split("=", 1)) for r in args.repo] or [("this", str(ROOT))]
    results: dict[str, dict[str, list[float]]] = {label: {} for label, _ in repos}
    for _ in range(args.rounds):
        for label, path in repos:
            for key, value in measure(Path(path).resolve(), args.window_s).items():
                results[label].setdefault(key, []).append(value)
            print(f"{label}: {results[label]}", file=sys.stderr)
    print()
    print(f"2-rank MLP job, {args.window_s:.0f} s window per round, {args.rounds} round(s); CPU as % of one core")
    print()
    print("| code | worker process (target ≤ 1 %) | API | the job (guard, agent, ranks) |")
    print("|---|---|---|---|")
    for label, r in results.items():
        w = statistics.median(r["worker"])
        print(f"| {label} | {w:.2f} % ({'pass' if w <= 1.0 else 'FAIL'}) | {statistics.median(r['api']):.2f} % | "
              f"{statistics.median(r['job']):.0f} % |")  # fmt: skip
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
