"""Sweeps on the pool (issue 24): a random sweep of `--trials` tiny digits trials, `--parallel` at a time, on a
live API and one worker with that many CPU slots.

    .venv/bin/python bench/sweeps.py [--trials 16] [--parallel 2] [--steps 12]

Rows, from the trials' own timelines (GET /api/jobs/{id}: when each was queued, claimed and ended):
  - the gap between one trial ending and the next trial being claimed (the driver runs in the scheduler's
    pass: a trial's end wakes it, so the gap is the pass, the submit and the claim, not the poll period);
  - the sweep's wall time (its first trial queued → its last trial ended) against the sum of its trials'
    times (claimed → ended) ÷ the slots: 1.0 would be slots never idle.
The machine is shared and noisy: compare the ratio, not the seconds.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BENCH_TOKEN = "bench-sweeps-token-" + "x" * 32


@contextmanager
def live_service(tmp: Path, slots: int) -> Iterator[Any]:
    """A live API (uvicorn in a thread) and one `rankzero worker` with `slots` CPU rank slots and as many
    concurrent tasks, on SQLite; stopped (SIGTERM, then its group SIGKILLed) at the end."""
    import httpx
    import uvicorn

    from api.app import create_app
    from cli.serve import settings_env
    from core.settings import Settings
    from worker.launch_command import free_port

    settings = Settings(data_dir=tmp / "data", runs_dir=tmp / "runs", api_token=BENCH_TOKEN, gpus="", cpu_slots=slots)
    settings.data_dir.mkdir(parents=True)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    env = settings_env(settings) | {"OMP_NUM_THREADS": "1"}
    with open(tmp / "worker.log", "wb") as log:
        worker = subprocess.Popen([sys.executable, "-m", "cli.main", "worker", "--concurrency", str(slots)], cwd=ROOT,
                                  env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while b" ready." not in (tmp / "worker.log").read_bytes():
            if time.monotonic() > deadline or worker.poll() is not None:
                raise RuntimeError("the worker did not start; see " + str(tmp / "worker.log"))
            time.sleep(0.1)
        headers = {"Authorization": f"Bearer {BENCH_TOKEN}"}
        yield httpx.Client(base_url=f"http://127.0.0.1:{port}/api", headers=headers, timeout=30)
    finally:
        os.kill(worker.pid, signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
        server.should_exit = True
        thread.join(10)


def _at(job: dict[str, Any], status: str) -> float | None:
    times = [t["at"] for t in job["transitions"] if t["status"] == status]
    return datetime.fromisoformat(times[0]).timestamp() if times else None


def run(trials: int, parallel: int, steps: int) -> dict[str, Any]:
    body = {
        "name": "bench-sweep",
        "job": {"model": {"name": "mlp"}, "data": {"name": "digits"}, "batch_size": 16, "max_steps": steps,
                "device": "cpu", "log_every": 2, "eval_every": steps},
        "method": "random", "metric": "val/loss", "trials": trials, "parallel": parallel,
        "parameters": {"optimizer.lr": {"log_uniform": [0.001, 0.5]}},
    }  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp, live_service(Path(tmp), parallel) as client:
        sweep = client.post("/sweeps", json=body).json()
        deadline = time.monotonic() + 60 * trials
        while True:
            detail = client.get(f"/sweeps/{sweep['id']}").json()
            if detail["status"] == "finished":
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the sweep did not finish: {detail}")
            time.sleep(1.0)
        jobs = [client.get(f"/jobs/{t['job_id']}").json() for t in detail["trials"]]
    spans = []
    for job in jobs:
        queued, claimed = _at(job, "queued"), _at(job, "starting")
        ended = next((_at(job, s) for s in ("succeeded", "failed", "cancelled") if _at(job, s)), None)
        assert queued and claimed and ended, job
        spans.append((queued, claimed, ended))
    ends = sorted(e for _, _, e in spans)
    claims = sorted(c for _, c, _ in spans)
    # Each end but the last `parallel` frees a slot the next claim after it takes.
    gaps = [
        min(c for c in claims if c >= end) - end
        for end in ends[: len(ends) - parallel]
        if any(c >= end for c in claims)
    ]
    wall = max(ends) - min(q for q, _, _ in spans)
    busy = sum(e - c for _, c, e in spans) / parallel
    return {"trials": len(spans), "gap_median_s": statistics.median(gaps) if gaps else float("nan"),
            "gap_max_s": max(gaps) if gaps else float("nan"), "wall_s": wall, "busy_per_slot_s": busy,
            "ratio": wall / busy}  # fmt: skip


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args(argv)
    r = run(args.trials, args.parallel, args.steps)
    print(f"{r['trials']} trials, {args.parallel} at a time, {args.steps} steps each")
    print(f"gap, a trial's end → the next trial claimed: median {r['gap_median_s']:.2f} s, max {r['gap_max_s']:.2f} s")
    print(
        f"wall {r['wall_s']:.1f} s vs sum of trial times ÷ slots {r['busy_per_slot_s']:.1f} s: ratio {r['ratio']:.2f}"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
