"""What the worker costs while a 2-rank job runs (issue 29: ≤ 1 % of a core), beside the job's own CPU.

    .venv/bin/python bench/worker_cpu.py [--window-s 60] [--rounds 1] [--log-every 10] [--repo LABEL=PATH ...]

For each code tree (`--repo`; default: this checkout; e.g. `--repo base=/tmp/base --repo new=.` with
`git archive HEAD | tar -x -C /tmp/base`), alternating when `--rounds` > 1:

1. `rankzero up` (API + one worker, SQLite + the embedded broker, the real trainer) in a fresh data dir;
2. submit the issue's job: an MLP 784-512-512-10 on synthetic data, batch 64, 2 ranks on CPU (gloo),
   a progress and a metric event every `--log-every` steps (1: every step, issue 42); wait for its first progress;
3. over `--window-s` seconds, user + system CPU from /proc of the whole service, per process: the worker
   process (Celery, the supervision loop, ingest, the resource sampler, heartbeats, and, as threads of it,
   the scheduler leader and the embedded broker's transport), the `up` process (the API), any other process
   of the service (not under the job's sandbox), and everything under the worker (sandbox guard, torchrun's
   agent, the ranks); and the job's steps/s over the window;
4. cancel the job and stop.

CPU time, not wall time: neighbours on a shared machine slow both alike but add nothing to it.
Prints one table, one row per code tree.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from idle_cpu import TICK, Up, tree_ticks  # bench/ is not a package: beside this file

ROOT = Path(__file__).resolve().parents[1]
TERMINAL = ("succeeded", "failed", "cancelled")


def job_spec(max_steps: int, log_every: int = 10) -> dict:
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
        "log_every": log_every,
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


def measure(repo: Path, window_s: float, log_every: int = 10, fake_step_s: float | None = None) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="rankzero-worker-cpu-") as tmpdir:
        # RANKZERO_SANDBOX_OFF=1 in the bench's environment: jobs unsandboxed, where this host's bwrap cannot run
        # them (the sandbox guard's CPU is the job's column either way, never the service's).
        extra = {"RANKZERO_SANDBOX": "off"} if os.environ.get("RANKZERO_SANDBOX_OFF") == "1" else {}
        fake = "tests.support.fake_trainer" if fake_step_s is not None else None
        up = Up(repo, Path(tmpdir), trainer_module=fake, extra_env=extra)
        try:
            up.wait_ready()
            worker = _worker_pid(up.proc.pid)
            spec = job_spec(max_steps=1_000_000, log_every=log_every)
            if fake_step_s is not None:  # the stand-in trainer: a metric and a progress event every step, no compute
                spec["model"]["args"]["step_s"] = fake_step_s
            r = up.client.post("/jobs", json=spec)
            r.raise_for_status()
            job_id = r.json()["id"]
            _wait_progress(up, job_id)
            time.sleep(5)  # past the ranks' start
            step0 = up.client.get(f"/jobs/{job_id}").json()["step"] or 0
            others = [
                p for p in tree_ticks(up.proc.pid) if p not in (up.proc.pid, worker) and p not in tree_ticks(worker)
            ]
            tree0, up0, w0, t0 = tree_ticks(worker), _own_ticks(up.proc.pid), _own_ticks(worker), time.monotonic()
            o0 = sum(_own_ticks(p) for p in others)
            time.sleep(window_s)
            tree1, up1, w1, t1 = tree_ticks(worker), _own_ticks(up.proc.pid), _own_ticks(worker), time.monotonic()
            o1 = sum(_own_ticks(p) for p in others)
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

    service = pct(w1 - w0) + pct(up1 - up0) + pct(o1 - o0)
    steps_s = ((job["step"] or 0) - step0) / seconds
    return {"worker": pct(w1 - w0), "api": pct(up1 - up0), "other": pct(o1 - o0), "service": service,
            "job": pct(below), "steps_s": steps_s}  # fmt: skip


def main(argv: list[str]) -> dict[str, dict[str, list[float]]]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--window-s", type=float, default=60)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--log-every", type=int, default=10, help="the job logs every this many steps (1: each step)")
    p.add_argument("--fake-step-s", type=float, default=None,
                   help="the stand-in trainer (tests/support/fake_trainer.py), a step every this many s, each logged: "
                   "the service's cost at a step rate CPU ranks may not reach (0.005: ~200 steps/s)")  # fmt: skip
    p.add_argument("--repo", action="append", default=[], help="LABEL=PATH (repeatable); default: this checkout")
    args = p.parse_args(argv)
    repos = [tuple(r.split("=", 1)) for r in args.repo] or [("this", str(ROOT))]
    results: dict[str, dict[str, list[float]]] = {label: {} for label, _ in repos}
    for _ in range(args.rounds):
        for label, path in repos:
            for key, value in measure(Path(path).resolve(), args.window_s, args.log_every, args.fake_step_s).items():
                results[label].setdefault(key, []).append(value)
            print(f"{label}: {results[label]}", file=sys.stderr)
    print()
    what = f"stand-in trainer, a step every {args.fake_step_s} s" if args.fake_step_s else "2-rank MLP job"
    print(f"{what} logging every {args.log_every} step(s), {args.window_s:.0f} s window per round, "
          f"{args.rounds} round(s); CPU as % of one core")  # fmt: skip
    print()
    print("| code | steps/s | worker (+ scheduler, broker) | API | other service processes "
          "| whole service (target ≤ 1 %) | the job (guard, agent, ranks) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for label, r in results.items():
        med = {k: statistics.median(v) for k, v in r.items()}
        print(f"| {label} | {med['steps_s']:.0f} | {med['worker']:.2f} % | {med['api']:.2f} % | {med['other']:.2f} % "
              f"| {med['service']:.2f} % ({'pass' if med['service'] <= 1.0 else 'FAIL'}) "
              f"| {med['job']:.0f} % |")  # fmt: skip
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
