"""API read latency while the service drains a burst of jobs (issue 12, item 19).

    .venv/bin/python bench/api_latency.py [--jobs 200] [--workers 2] [--clients 4] [--think-s 0.05]
                                          [--idle-s 20] [--max-load-s 600] [--repo PATH] [--sqlite]

The real service as processes: `rankzero api` (uvicorn) and `--workers` × `rankzero worker`
(concurrency 1 each) on PostgreSQL (127.0.0.1:5432, a database of its own, dropped after) and Redis
(127.0.0.1:6379, a queue of its own). Jobs are tiny: the torch-free stand-in trainer
(tests/support/fake_trainer.py; torchrun is still real), 20 steps, a loss point and a progress
event per step, a checkpoint every 5.

1. warm-up: a few jobs run to the end (page cache for torchrun; ids for GET /jobs/{id});
2. idle: `--clients` threads, each looping GET /api/jobs and GET /api/jobs/{random id} with
   `--think-s` between requests (a few dashboards), for `--idle-s` seconds: the baseline;
3. load: `--jobs` jobs submitted at once (8 submitting threads), the same readers running until
   the queue has drained (or `--max-load-s`; then the rest are cancelled);
4. checks: every job of the burst exists once and ended `succeeded`, no job left live, each holds its 20 points.

Prints p50 / p99 / max per route and phase, and load/idle ratios (the idle phase is the baseline of
the same run: the machine is shared and noisy), and how many PostgreSQL connections were opened during
the load phase (pg_stat_database.sessions: pool churn). Target: p99 ≤ 100 ms under load.
`--repo PATH` runs another checkout's code (e.g. `git archive <rev> | tar -x -C /tmp/base`) with
this script, for before/after comparisons.
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "rankzero-bench-token-0123456789abcdef0123456789"
PG_ADMIN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres connect_timeout=3"
TERMINAL = {"succeeded", "failed", "cancelled"}
STEPS = 20
SPEC: dict[str, Any] = {
    "name": "burst",
    "model": {"name": "mlp"},
    "params": {"step_s": 0.01},  # the stand-in trainer's pace (tests/support/fake_trainer.py)
    "data": {"name": "digits"},
    "batch_size": 8,
    "max_steps": STEPS,
    "log_every": 1,
    "device": "cpu",
    "checkpoint": {"every_steps": 5, "every_epochs": None},
}
ROUTES = ("GET /jobs", "GET /jobs/{id}")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def pg_database(use_sqlite: bool, tmp: Path) -> Iterator[str]:
    if use_sqlite:
        yield f"sqlite:///{tmp / 'rankzero.db'}"
        return
    import psycopg

    name = f"rankzero_w_apilat_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class Service:
    """`rankzero api` + N `rankzero worker` subprocesses, each in its own process group."""

    def __init__(self, repo: Path, tmp: Path, database_url: str, use_sqlite: bool) -> None:
        self.repo = repo
        self.tmp = tmp
        self.port = free_port()
        queue = f"bench_apilat_{secrets.token_hex(4)}"
        broker = f"sqla+sqlite:///{tmp / 'broker.db'}" if use_sqlite else "redis://127.0.0.1:6379/0"
        self.env = {
            **os.environ,
            "PYTHONPATH": str(repo),
            "PYTHONUNBUFFERED": "1",
            "OMP_NUM_THREADS": "1",
            "RANKZERO_DATA_DIR": str(tmp / "data"),
            "RANKZERO_RUNS_DIR": str(tmp / "runs"),
            "RANKZERO_DATABASE_URL": database_url,
            "RANKZERO_BROKER_URL": broker,
            "RANKZERO_QUEUE": queue,
            "RANKZERO_API_TOKEN": TOKEN,
            "RANKZERO_GPUS": "",
            "RANKZERO_MAX_ACTIVE_JOBS": "100000",
            "RANKZERO_HEARTBEAT_S": "1",
        }
        self.procs: list[subprocess.Popen[bytes]] = []
        self.base = f"http://127.0.0.1:{self.port}/api"

    def _start(self, args: list[str], log: str, **extra: str) -> subprocess.Popen[bytes]:
        with open(self.tmp / log, "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "cli.main", *args],
                cwd=self.repo,
                env={**self.env, **extra},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs.append(proc)
        return proc

    def start(self, workers: int) -> None:
        self._start(["api", "--port", str(self.port)], "api.log")
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(f"{self.base}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or self.procs[0].poll() is not None:
                raise RuntimeError(f"the API did not start: {(self.tmp / 'api.log').read_text()[-3000:]}")
            time.sleep(0.2)
        for i in range(workers):
            self._start(
                ["worker", "--concurrency", "1", "--loglevel", "info"],
                f"worker{i}.log",
                RANKZERO_TRAINER_MODULE="tests.support.fake_trainer",
            )
        for i in range(workers):
            log = self.tmp / f"worker{i}.log"
            while b" ready." not in log.read_bytes():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"worker {i} did not start: {log.read_text()[-3000:]}")
                time.sleep(0.2)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.base, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)


class Readers:
    """`n` threads reading the job list and single jobs; latencies per route while `phase` is set."""

    def __init__(self, svc: Service, n: int, think_s: float) -> None:
        self.svc = svc
        self.n = n
        self.think_s = think_s
        self.ids: list[int] = []
        self.phase: str | None = None
        self.samples: dict[tuple[str, str], list[float]] = {}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(n)]
        self._lock = threading.Lock()

    def __enter__(self) -> Readers:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)

    def _timed(self, client: httpx.Client, route: str, url: str) -> None:
        phase = self.phase
        t0 = time.perf_counter()
        r = client.get(url)
        took = time.perf_counter() - t0
        if r.status_code != 200:
            self.errors.append(f"{url}: {r.status_code} {r.text[:200]}")
        if phase is not None and phase == self.phase:
            with self._lock:
                self.samples.setdefault((route, phase), []).append(took)

    def _loop(self) -> None:
        rng = random.Random()
        with self.svc.client() as client:
            while not self._stop.is_set():
                self._timed(client, ROUTES[0], "/jobs?limit=50")
                time.sleep(self.think_s)
                if self.ids:
                    self._timed(client, ROUTES[1], f"/jobs/{rng.choice(self.ids)}")
                time.sleep(self.think_s)


def wait_drained(client: httpx.Client, ids: list[int], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        page = client.get("/jobs", params={"limit": 1, "status": ["queued", "starting", "running", "cancelling"]})
        if page.json()["total"] == 0:
            return True
        time.sleep(0.5)
    return False


def check_burst(client: httpx.Client, ids: list[int]) -> list[str]:
    """What went wrong with the burst's jobs: not exactly once, not succeeded, points missing."""
    problems = []
    if len(set(ids)) != len(ids):
        problems.append("duplicate job ids")
    listed = client.get("/jobs", params={"limit": 500, "name": "burst"}).json()
    if listed["total"] != len(ids):
        problems.append(f"{listed['total']} burst jobs listed, {len(ids)} submitted")
    bad = [j["id"] for j in listed["items"] if j["status"] != "succeeded"]
    if bad:
        problems.append(f"not succeeded: {bad[:10]}{'…' if len(bad) > 10 else ''}")
    for job_id in random.sample(ids, min(20, len(ids))):
        body = client.get(f"/jobs/{job_id}/metrics", params={"name": "train/loss", "max_points": 1000}).json()
        steps = [p["step"] for s in body["series"] for p in s["points"]]
        if len(steps) != len(set(steps)) or len(steps) != STEPS:
            problems.append(f"job {job_id}: {len(steps)} loss points ({len(set(steps))} distinct), want {STEPS}")
    return problems


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def report(readers: Readers, burst_s: float, drained: bool, problems: list[str], args: argparse.Namespace) -> None:
    print()
    print(f"{args.jobs} jobs, {args.workers} workers, {args.clients} readers (think {args.think_s * 1000:.0f} ms), "
          f"{'SQLite + embedded' if args.sqlite else 'PostgreSQL + Redis'}, code: {args.repo}")  # fmt: skip
    print(f"burst drained: {'yes' if drained else 'NO'} in {burst_s:.0f} s; checks: {'; '.join(problems) or 'ok'}")
    if getattr(args, "sessions", None) is not None:
        print(f"PostgreSQL connections opened during the load phase (all processes): {args.sessions}")
    if readers.errors:
        print(f"reader errors: {len(readers.errors)}, first: {readers.errors[0]}")
    print()
    print("| route | phase | requests | p50 | p99 | max | p99 load/idle | target p99 ≤ 100 ms |")
    print("|---|---|---|---|---|---|---|---|")
    for route in ROUTES:
        idle = readers.samples.get((route, "idle"), [])
        for phase in ("idle", "load"):
            xs = readers.samples.get((route, phase), [])
            if not xs:
                continue
            ratio = f"{pct(xs, 0.99) / pct(idle, 0.99):.1f}×" if phase == "load" and idle else ""
            verdict = ("pass" if pct(xs, 0.99) <= 0.100 else "FAIL") if phase == "load" else ""
            print(f"| {route} | {phase} | {len(xs)} | {statistics.median(xs) * 1000:.1f} ms | "
                  f"{pct(xs, 0.99) * 1000:.1f} ms | {max(xs) * 1000:.0f} ms | {ratio} | {verdict} |")  # fmt: skip


def submit_all(client: httpx.Client, n: int, name: str) -> list[int]:
    def one(_: int) -> int:
        r = client.post("/jobs", json={**SPEC, "name": name})
        r.raise_for_status()
        return int(r.json()["id"])

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(one, range(n)))


def sessions(url: str) -> int | None:
    """Server connections opened so far on the database (PostgreSQL's pg_stat_database.sessions)."""
    if not url.startswith("postgresql"):
        return None
    import psycopg

    with psycopg.connect(url, autocommit=True) as c:
        c.execute("SELECT pg_stat_clear_snapshot()")
        return c.execute("SELECT sessions FROM pg_stat_database WHERE datname = current_database()").fetchone()[0]


def run(args: argparse.Namespace, tmp: Path) -> None:
    with pg_database(args.sqlite, tmp) as url:
        svc = Service(args.repo, tmp, url, args.sqlite)
        try:
            svc.start(args.workers)
            with svc.client() as client, Readers(svc, args.clients, args.think_s) as readers:
                warm = submit_all(client, 2 * args.workers, "warm")
                wait_drained(client, warm, 300)
                readers.ids = list(warm)
                readers.phase = "idle"
                time.sleep(args.idle_s)
                readers.phase = None
                opened = sessions(url)
                t0 = time.monotonic()
                readers.phase = "load"
                ids = submit_all(client, args.jobs, "burst")
                readers.ids = warm + ids
                drained = wait_drained(client, ids, args.max_load_s)
                readers.phase = None
                burst_s = time.monotonic() - t0
                if opened is not None:
                    args.sessions = sessions(url) - opened - 1  # not this count's own connection
                if not drained:
                    for job_id in ids:
                        client.post(f"/jobs/{job_id}/cancel")
                problems = check_burst(client, ids) if drained else ["not drained: cancelled the rest"]
            report(readers, burst_s, drained, problems, args)
        finally:
            svc.stop()


def main(argv: list[str]) -> None:
    import tempfile

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=200)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--think-s", type=float, default=0.05)
    p.add_argument("--idle-s", type=float, default=20)
    p.add_argument("--max-load-s", type=float, default=600)
    p.add_argument("--repo", type=Path, default=ROOT)
    p.add_argument("--sqlite", action="store_true", help="SQLite + the embedded broker instead")
    args = p.parse_args(argv)
    args.repo = args.repo.resolve()
    with tempfile.TemporaryDirectory(prefix="rankzero-apilat-") as tmpdir:
        run(args, Path(tmpdir))


if __name__ == "__main__":
    main(sys.argv[1:])
