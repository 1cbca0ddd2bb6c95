"""What an idle `rankzero up` costs, and how fast it starts a job submitted after a quiet spell.

    .venv/bin/python bench/idle_cpu.py [--idle-s 60] [--jobs 5] [--gap-s 8] [--rounds 1]
                                       [--repo LABEL=PATH ...] [--database sqlite|postgres ...]

For each code tree (`--repo`; default: this checkout; e.g. `--repo base=/tmp/base --repo new=.` with
`git archive <rev> | tar -x -C /tmp/base`), alternating when `--rounds` > 1 (the machine is shared
and noisy):

1. `rankzero up` (API + one worker, the embedded broker) in a fresh data dir, on SQLite or (`--database
   postgres`) a fresh database on the PostgreSQL server at 127.0.0.1:5432 (user postgres, trust; dropped
   afterwards); wait for the worker to be ready and 10 s more;
2. idle CPU: user + system time of `up` and every process under it (the worker and its children),
   from /proc, over `--idle-s` seconds, as % of one core;
3. submit → start: `--jobs` tiny jobs (the torch-free stand-in trainer; torchrun is real), each
   submitted after `--gap-s` seconds of quiet: POST /jobs → the job's `starting` transition (the
   worker's claim; SQLite, so stamped by this host's clock) and → its `running` transition.

Prints one table: idle CPU (target ≤ 1 %), submit → claim and → running (median, max).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "rankzero-bench-token-0123456789abcdef0123456789"
TICK = os.sysconf("SC_CLK_TCK")
SPEC = {
    "name": "idle-bench",
    "model": {"name": "mlp"},
    "params": {"step_s": 0.01},  # the stand-in trainer's pace (tests/support/fake_trainer.py)
    "data": {"name": "digits"},
    "batch_size": 8,
    "max_steps": 3,
    "device": "cpu",
    "checkpoint": {"every_steps": None, "every_epochs": None},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stat(pid: int) -> tuple[int, int] | None:
    """(ppid, utime + stime in ticks) of a live process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    return int(fields[1]), int(fields[11]) + int(fields[12])


def tree_ticks(root: int) -> dict[int, int]:
    """CPU ticks of `root` and all its descendants, by pid."""
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (s := _stat(int(entry))) is not None:
            stats[int(entry)] = s
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            out[pid] = stats[pid][1]
            todo.extend(children.get(pid, []))
    return out


PG_ADMIN_DSN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres connect_timeout=3"


@contextlib.contextmanager
def database(kind: str, tmp: Path) -> Iterator[str | None]:
    """The database URL a run uses: None (SQLite in the data dir, `up`'s default) or a fresh PostgreSQL one."""
    if kind == "sqlite":
        yield None
        return
    import psycopg
    from psycopg import sql

    name = f"rankzero_bench_{os.getpid()}_{tmp.name[-8:].lower().replace('-', '_')}"
    with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(PG_ADMIN_DSN, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


class Up:
    def __init__(
        self,
        repo: Path,
        tmp: Path,
        trainer_module: str | None = "tests.support.fake_trainer",
        database_url: str | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.repo, self.tmp, self.port = repo, tmp, free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("RANKZERO_")}
        env |= {
            "PYTHONPATH": str(repo),
            "PYTHONUNBUFFERED": "1",
            "RANKZERO_DATA_DIR": str(tmp / "data"),
            "RANKZERO_API_TOKEN": TOKEN,
            "RANKZERO_GPUS": "",
            "OMP_NUM_THREADS": "1",
        }
        if database_url is not None:
            env["RANKZERO_DATABASE_URL"] = database_url
        if trainer_module is not None:  # None: the real trainer (bench/worker_cpu.py)
            env["RANKZERO_TRAINER_MODULE"] = trainer_module
        env |= extra_env or {}
        self.log = open(tmp / "up.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "up", "--port", str(self.port)],
            cwd=repo,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.client = httpx.Client(
            base_url=f"http://127.0.0.1:{self.port}/api", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
        )

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        worker_log = self.tmp / "data" / "worker.log"
        while True:
            try:
                healthy = self.client.get("/health").status_code == 200
            except httpx.HTTPError:
                healthy = False
            if healthy and worker_log.exists() and b" ready." in worker_log.read_bytes():
                return
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"rankzero up did not start: {(self.tmp / 'up.log').read_text()[-3000:]}")
            time.sleep(0.2)

    def idle_cpu(self, seconds: float) -> float:
        before = tree_ticks(self.proc.pid)
        time.sleep(seconds)
        after = tree_ticks(self.proc.pid)
        used = sum(t - before.get(pid, 0) for pid, t in after.items())
        return 100.0 * used / TICK / seconds

    def start_latency(self, gap_s: float) -> tuple[float, float]:
        time.sleep(gap_s)
        t0 = time.time()
        r = self.client.post("/jobs", json=SPEC)
        r.raise_for_status()
        job_id = r.json()["id"]
        deadline = time.monotonic() + 120
        while True:
            job = self.client.get(f"/jobs/{job_id}").json()
            at = {t["status"]: datetime.fromisoformat(t["at"]).timestamp() for t in job["transitions"]}
            if job["status"] in ("succeeded", "failed", "cancelled"):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} did not finish: {job}")
            time.sleep(0.1)
        if job["status"] != "succeeded":
            raise RuntimeError(f"job {job_id} {job['status']}: {job['error']}")
        return at["starting"] - t0, at["running"] - t0

    def stop(self) -> None:
        os.kill(self.proc.pid, signal.SIGINT)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.log.close()
        self.client.close()


def measure(repo: Path, args: argparse.Namespace, kind: str = "sqlite") -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory(prefix="rankzero-idle-") as tmpdir, database(kind, Path(tmpdir)) as url:
        up = Up(repo, Path(tmpdir), database_url=url)
        try:
            up.wait_ready()
            time.sleep(10)
            cpu = up.idle_cpu(args.idle_s)
            claims, runs = [], []
            for _ in range(args.jobs):
                claim, run = up.start_latency(args.gap_s)
                claims.append(claim)
                runs.append(run)
        finally:
            up.stop()
    return {"cpu": [cpu], "claim": claims, "running": runs}


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--idle-s", type=float, default=60)
    p.add_argument("--jobs", type=int, default=5)
    p.add_argument("--gap-s", type=float, default=8)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--repo", action="append", default=[], help="LABEL=PATH (repeatable); default: this checkout")
    p.add_argument("--database", action="append", choices=("sqlite", "postgres"), default=[],
                   help="sqlite (default) or postgres (repeatable: both, alternating)")  # fmt: skip
    args = p.parse_args(argv)
    repos = [tuple(r.split("=", 1)) for r in args.repo] or [("this", str(ROOT))]
    kinds = args.database or ["sqlite"]
    rows = [(f"{label}, {kind}" if len(kinds) > 1 else label, path, kind) for kind in kinds for label, path in repos]
    results: dict[str, dict[str, list[float]]] = {label: {} for label, _, _ in rows}
    for _ in range(args.rounds):
        for label, path, kind in rows:
            for key, values in measure(Path(path).resolve(), args, kind).items():
                results[label].setdefault(key, []).extend(values)
            print(f"{label}: {results[label]}", file=sys.stderr)
    print()
    print(f"idle {args.idle_s:.0f} s per round, {args.rounds} round(s); {args.jobs} jobs per round, each after "
          f"{args.gap_s:.0f} s of quiet")  # fmt: skip
    print()
    print("| code | idle CPU, % of a core (runs) | target | submit → claim, median (max) | submit → running |")
    print("|---|---|---|---|---|")
    for label, r in results.items():
        cpu = statistics.median(r["cpu"])
        runs = ", ".join(f"{c:.2f}" for c in r["cpu"])
        print(f"| {label} | {cpu:.2f} % ({runs}) | ≤ 1 %: {'pass' if cpu <= 1.0 else 'FAIL'} | "
              f"{statistics.median(r['claim']) * 1000:.0f} ms ({max(r['claim']) * 1000:.0f}) | "
              f"{statistics.median(r['running']) * 1000:.0f} ms (max {max(r['running']) * 1000:.0f}) |")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:])
