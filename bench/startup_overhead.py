"""Start-up overhead (issue 27 item 3): the same torchrun script bare and through rankzero, submit → its first
output line, alternating.

    .venv/bin/python bench/startup_overhead.py [--rounds 4] [--nproc 2]

The script (written to a temp folder) imports torch, joins its gloo process group and prints `iter 0`,
as nanoGPT's loop does at its first iteration; then it trains nothing and exits.
- bare: `torchrun --nproc-per-node N train.py`, from just before Popen to `iter 0` on its stdout;
- rankzero: POST /api/jobs (entrypoint `train.py`, the bundle uploaded once beforehand, as a second
  `rankzero submit` of an unchanged folder does) to a live API with an idle worker
  (`rankzero worker`, sandbox as configured: RANKZERO_SANDBOX), until `iter 0` is in rank 0's log.
Rounds alternate bare / rankzero so drifting load hits both alike. Printed: each round, the medians, the
overhead, and where the service's share goes: submit → `running` (scheduling pass, claim, bundle,
sandbox set-up, torchrun's Popen) and `running` → first line (torchrun, rank wrappers, imports, rendezvous).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.service import live_service  # after the path is set

SCRIPT = """\
import os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 0:
    print("iter 0: loss 3.9123, time 40.12ms, mfu -100.00%", flush=True)
dist.barrier()
dist.destroy_process_group()
"""
MARK = b"iter 0:"


def _wait_for_mark(find: Callable[[], bool], timeout: float = 300) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if find():
            return time.time()
        time.sleep(0.01)
    raise TimeoutError("no `iter 0` line")


def bare(folder: Path, nproc: int) -> float:
    from worker.launch import free_port, rank_env

    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", "--master-addr=127.0.0.1",
           f"--master-port={free_port()}", "train.py"]  # fmt: skip
    out = folder / f"bare-{time.monotonic_ns()}.log"
    t0 = time.time()
    with open(out, "wb") as fh:
        proc = subprocess.Popen(cmd, cwd=folder, env=rank_env("bench", None), stdout=fh, stderr=subprocess.STDOUT)
    try:
        return _wait_for_mark(lambda: MARK in out.read_bytes()) - t0
    finally:
        proc.wait(timeout=120)


def _rank0_output(run_dir: Path) -> bool:
    for path in run_dir.glob("logs/**/*"):
        if path.is_file():
            try:
                if MARK in path.read_bytes():
                    return True
            except OSError:
                continue
    return False


def through_rankzero(settings: object, client: object, code: str, nproc: int) -> tuple[float, float]:
    """Submit → first line, and submit → `running` (the service's dispatch share)."""
    spec = {"name": "bench-startup", "code": code, "entrypoint": "train.py", "nproc": nproc, "device": "cpu"}
    t0 = time.time()
    r = client.post("/jobs", json=spec)  # type: ignore[attr-defined]
    r.raise_for_status()
    job_id = r.json()["id"]
    run_dir = Path(settings.resolved_runs_dir) / f"job_{job_id}"  # type: ignore[attr-defined]
    took = _wait_for_mark(lambda: _rank0_output(run_dir)) - t0
    deadline = time.monotonic() + 120
    while (job := client.get(f"/jobs/{job_id}").json())["status"] not in ("succeeded", "failed", "cancelled"):  # type: ignore[attr-defined]
        if time.monotonic() > deadline:
            raise TimeoutError(f"bench job {job_id} did not finish")
        time.sleep(0.1)
    running = [t for t in job["transitions"] if t["status"] == "running"]
    return took, datetime.fromisoformat(running[0]["at"]).timestamp() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--nproc", type=int, default=2)
    args = parser.parse_args()
    from core import bundles

    with tempfile.TemporaryDirectory(prefix="rz-startup-") as tmp_name:
        tmp = Path(tmp_name)
        folder = tmp / "project"
        folder.mkdir()
        (folder / "train.py").write_text(SCRIPT)
        with live_service(tmp / "service") as (settings, client):
            packed = bundles.pack(folder, tmp / "b.tar.gz")
            r = client.post("/code", content=packed.archive.read_bytes(), headers={"Content-Type": "application/gzip"})
            r.raise_for_status()
            code = f"sha256:{packed.sha256}"
            through_rankzero(settings, client, code, args.nproc)  # warm: the bundle unpacked, imports cached
            bare(folder, args.nproc)
            rows: list[tuple[float, float, float]] = []
            for i in range(args.rounds):
                b = bare(folder, args.nproc)
                s, dispatch = through_rankzero(settings, client, code, args.nproc)
                rows.append((b, s, dispatch))
                over = f"+{s - b:5.2f} s; submit → running {dispatch:5.2f} s"
                print(f"round {i + 1}: bare {b:6.2f} s   rankzero {s:6.2f} s   ({over})")
    b, s, d = (statistics.median(c) for c in zip(*rows, strict=True))
    print(f"median: bare {b:.2f} s, rankzero {s:.2f} s, overhead +{s - b:.2f} s "
          f"(submit → running {d:.2f} s; running → first line {s - d:.2f} s vs bare {b:.2f} s)")  # fmt: skip


if __name__ == "__main__":
    main()
