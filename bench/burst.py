"""A burst of jobs on three worker processes (three hosts), issue 20's fault-pass figure: none may fail.

    .venv/bin/python bench/burst.py [--jobs 300] [--hosts 3] [--slots 2] [--step-s 0.05] [--steps 4] [--sqlite]

A live API (uvicorn, its own process) and `--hosts` Celery workers, each registered as a host of its own
(`burst-h<i>`, `--slots` CPU rank slots), on PostgreSQL (127.0.0.1:5432, user postgres: a database of its
own, dropped after) and Redis (127.0.0.1:6379, a queue name of its own). Jobs are the stand-in trainer
(tests/support/fake_trainer.py, still launched by torchrun, one rank, `--steps` steps of `--step-s`): the
burst measures the service, not training. A reader thread meanwhile times `GET /api/jobs` and
`GET /api/jobs/{id}` (alternating, back to back).

Printed: jobs by final status (the target: every one `succeeded`), the claim gap (a job's `queued` →
`starting`: how long it waited, which includes waiting for a free slot; and the host idle gap: per host,
the time from one of its jobs ending to its next claim, while jobs were still waiting), and the API
latency p50/p99/max. Nothing is asserted; compare runs on the same machine.
"""

from __future__ import annotations

import argparse
import os
import secrets
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

TOKEN = "rankzero-bench-token-0123456789abcdef0123456789"  # the API refuses short tokens
PG_ADMIN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres connect_timeout=3"
TERMINAL = {"succeeded", "failed", "cancelled"}


def _psql(sql: str) -> None:
    import psycopg

    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(sql)  # pyright: ignore[reportArgumentType]  (our own literal DDL)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spec(i: int, steps: int, step_s: float) -> dict[str, Any]:
    return {
        "name": f"burst-{i}", "model": {"name": "mlp"}, "params": {"step_s": step_s}, "data": {"name": "digits"},
        "batch_size": 8, "nproc": 1, "max_steps": steps, "device": "cpu",
        "checkpoint": {"every_steps": None, "every_epochs": None},
    }  # fmt: skip


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _when(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


class Latency:
    """Times GET /api/jobs and GET /api/jobs/{id} back to back until stopped."""

    def __init__(self, base: str) -> None:
        import httpx

        self.http = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
        self.times: dict[str, list[float]] = {"GET /api/jobs": [], "GET /api/jobs/{id}": []}
        self.stop = threading.Event()
        self.job_id = 1

    def run(self) -> None:
        import httpx

        while not self.stop.is_set():
            for name, path in (("GET /api/jobs", "/api/jobs"), ("GET /api/jobs/{id}", f"/api/jobs/{self.job_id}")):
                t0 = time.perf_counter()
                try:
                    r = self.http.get(path)
                except httpx.HTTPError:  # the API stopping at the end, or overloaded: not a latency sample
                    continue
                if r.status_code == 200:
                    self.times[name].append(time.perf_counter() - t0)
            time.sleep(0.02)


@contextmanager
def service(args: argparse.Namespace) -> Iterator[str]:
    """The API and the hosts' workers on a database and a queue of their own; yields the API's base URL."""
    import httpx

    from core.migrate import upgrade

    tag = secrets.token_hex(4)
    db = f"rankzero_burst_{tag}"
    tmp = Path(tempfile.mkdtemp(prefix="rankzero-burst-"))
    if args.sqlite:
        url = f"sqlite:///{tmp / 'rankzero.db'}"
    else:
        _psql(f'CREATE DATABASE "{db}"')
        url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{db}"
    port = _free_port()
    env = {
        **os.environ, "PYTHONPATH": str(ROOT), "RANKZERO_API_TOKEN": TOKEN,
        "RANKZERO_DATA_DIR": str(tmp / "data"), "RANKZERO_RUNS_DIR": str(tmp / "runs"),
        "RANKZERO_DATABASE_URL": url,
        "RANKZERO_BROKER_URL": "redis://127.0.0.1:6379/0", "RANKZERO_QUEUE": f"burst-{tag}", "RANKZERO_GPUS": "",
        "RANKZERO_TRAINER_MODULE": "tests.support.fake_trainer",
        "RANKZERO_SANDBOX": os.environ.get("RANKZERO_SANDBOX", "on"),
        "RANKZERO_HOST": "127.0.0.1", "RANKZERO_PORT": str(port), "OMP_NUM_THREADS": "1",
        # the whole burst is queued at once: above the service's limits on queued jobs (100 by default)
        "RANKZERO_MAX_ACTIVE_JOBS": str(args.jobs + 10), "RANKZERO_QUOTA_QUEUED": str(args.jobs + 10),
    }  # fmt: skip
    procs: list[subprocess.Popen[bytes]] = []
    with open(tmp / "service.log", "ab") as log:
        try:
            upgrade(env["RANKZERO_DATABASE_URL"])
            api = [sys.executable, "-m", "uvicorn", "api.app:create_app", "--factory", "--host", "127.0.0.1",
                   "--port", str(port), "--log-level", "warning"]  # fmt: skip
            procs.append(subprocess.Popen(api, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True))  # fmt: skip
            for i in range(args.hosts):
                host_env = {**env, "RANKZERO_HOST_NAME": f"burst-h{i}", "RANKZERO_CPU_SLOTS": str(args.slots)}
                worker = [sys.executable, "-m", "celery", "-A", "worker.celery_app", "worker", "--pool=threads",
                          f"--concurrency={args.slots}", "-l", "warning", "-n", f"burst-h{i}-{tag}@%h",
                          "--without-gossip", "--without-mingle"]  # fmt: skip
                procs.append(subprocess.Popen(worker, cwd=ROOT, env=host_env, stdout=log, stderr=subprocess.STDOUT,
                                              start_new_session=True))  # fmt: skip
            base = f"http://127.0.0.1:{port}"
            http = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
            deadline = time.monotonic() + 180
            while not _hosts_up(http, args.hosts):
                if time.monotonic() > deadline:
                    raise SystemExit(f"the hosts did not register; see {tmp / 'service.log'}")
                time.sleep(0.5)
            yield base
        finally:
            for proc in reversed(procs):
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGTERM)
            for proc in procs:
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
            if not args.sqlite:
                _psql(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


def _hosts_up(http: Any, n: int) -> bool:
    try:
        return sum(1 for h in http.get("/api/hosts").json() if h["alive"]) >= n
    except Exception:  # the API is still starting
        return False


def burst(base: str, args: argparse.Namespace, reader: Latency) -> tuple[dict[int, dict[str, Any]], int, float, float]:
    """Submit every job, wait for them all; (the finished jobs by id, how many did not finish, submit s, wall s)."""
    import httpx

    http = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
    t0 = time.monotonic()
    ids = []
    for i in range(args.jobs):
        r = http.post("/api/jobs", json=_spec(i, args.steps, args.step_s))
        if r.status_code != 201:
            raise SystemExit(f"submit {i} refused: {r.status_code} {r.text[:300]}")
        ids.append(r.json()["id"])
    reader.job_id = ids[len(ids) // 2]
    submitted_s = time.monotonic() - t0
    pending, jobs = set(ids), {}
    while pending and time.monotonic() - t0 < args.timeout_s:
        for job_id in list(pending):
            job = http.get(f"/api/jobs/{job_id}").json()
            if job["status"] in TERMINAL:
                jobs[job_id] = job
                pending.discard(job_id)
        time.sleep(1.0)
    return jobs, len(pending), submitted_s, time.monotonic() - t0


def gaps(jobs: dict[int, dict[str, Any]]) -> tuple[list[float], list[float]]:
    """Each job's queued → claimed wait, and each host's idle gaps (a job ends there → its next claim)."""
    waits, idle = [], []
    spans: dict[str, list[tuple[float, float]]] = {}  # host → (claimed, ended)
    for job in jobs.values():
        at = {t["status"]: _when(t["at"]) for t in job["transitions"]}
        if "starting" in at and "queued" in at:
            waits.append(at["starting"] - at["queued"])
            host = ((job.get("placement") or {}).get("nodes") or [{}])[0].get("host", "?")
            spans.setdefault(host, []).append((at["starting"], max(v for k, v in at.items() if k in TERMINAL)))
    last_claim = max((c for host in spans.values() for c, _ in host), default=0.0)
    for host in spans.values():
        claims = sorted(c for c, _ in host)
        for _, end in host:  # while work was still waiting (before the last claim anywhere)
            later = [c for c in claims if c >= end]
            if later and end < last_claim:
                idle.append(later[0] - end)
    return waits, idle


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=300)
    ap.add_argument("--hosts", type=int, default=3)
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--step-s", type=float, default=0.05)
    ap.add_argument("--timeout-s", type=float, default=3600)
    ap.add_argument("--sqlite", action="store_true", help="SQLite in a temp dir instead of PostgreSQL")
    args = ap.parse_args()
    with service(args) as base:
        reader = Latency(base)
        thread = threading.Thread(target=reader.run, daemon=True)
        thread.start()
        jobs, unfinished, submitted_s, wall = burst(base, args, reader)
        reader.stop.set()
        thread.join(timeout=30)
    by_status: dict[str, int] = {"unfinished": unfinished}
    for job in jobs.values():
        by_status[job["status"]] = by_status.get(job["status"], 0) + 1
    print(f"{args.jobs} jobs on {args.hosts} hosts x {args.slots} slots: submitted in {submitted_s:.1f} s, "
          f"all done in {wall:.0f} s")  # fmt: skip
    print("final status:", ", ".join(f"{k} {v}" for k, v in sorted(by_status.items()) if v))
    for job in jobs.values():
        if job["status"] != "succeeded":
            print(f"  job {job['id']}: {job['status']}: {(job.get('error') or '')[:300]}")
    waits, idle = gaps(jobs)
    print(f"queued -> claimed: p50 {_percentile(waits, 0.5):.2f} s, p99 {_percentile(waits, 0.99):.2f} s, "
          f"max {max(waits, default=float('nan')):.2f} s (includes waiting for a free slot)")  # fmt: skip
    if idle:
        print(f"host idle gap (a job ends -> that host's next claim, work waiting): p50 {_percentile(idle, 0.5):.2f} s,"
              f" p99 {_percentile(idle, 0.99):.2f} s, max {max(idle):.2f} s")  # fmt: skip
    for name, times in reader.times.items():
        ms = [t * 1000 for t in times]
        if ms:
            p50, p99 = statistics.median(ms), _percentile(ms, 0.99)
            print(f"{name}: {len(ms)} requests, p50 {p50:.0f} ms, p99 {p99:.0f} ms, max {max(ms):.0f} ms")


if __name__ == "__main__":
    main()
