"""The service's benchmark: one run, one table.

    .venv/bin/python bench/service.py [--quick] [--ingest-only] [--baseline DIR | --base-rev REV] [--rounds N]

1. submit → first optimizer step: POST /jobs to a live API with an idle `rankzero worker`
   (embedded SQLite transport) until rank 0 logs step 1, against a bare `torchrun … -m trainer`
   launch → step 1 with the same spec. Target: service ≤ bare + 1.0 s.
2. metric ingest: worker/ingest.py writing 200,000 `metric` events (20,000 at a time) into SQLite and
   PostgreSQL, each measurement in a process of its own, then the checks (every point exactly once;
   the same events again, by a restarted ingester and by a stale one, add nothing). `--baseline DIR`
   (another checkout, e.g. `git archive <rev> | tar -x -C DIR`; `--base-rev HEAD` makes one of the committed
   code) measures its code too, alternating, and prints the ratio: the machine is shared, so compare within
   one run. Beside the parsed events, the same events read from an events.jsonl (JSON parsing included) and
   the chart rollups' fold; each with CPU µs a point (this process + the PostgreSQL backend), which the
   machine's load does not change. Target: ≥ 150,000 points/s on PostgreSQL.
3. GET /jobs/{id}/metrics on a 1,000,000-point series with max_points=2000, through the real app
   (bench/metrics_query.py, the API's code). Target: ≤ 150 ms.

PostgreSQL: 127.0.0.1:5432, user postgres; a database of its own is created and dropped per measurement.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# RANKZERO_BENCH_CODE: another checkout's code under this script (the ingest baseline, `--baseline`).
ROOT = Path(os.environ.get("RANKZERO_BENCH_CODE") or Path(__file__).resolve().parents[1])
sys.path.insert(0, str(ROOT))

SPEC = {
    "name": "bench",
    "model": {"name": "mlp"},
    "data": {"name": "digits"},
    "batch_size": 16,
    "nproc": 2,
    "max_steps": 3,
    "device": "cpu",
    "log_every": 1,
    "checkpoint": {"every_steps": None, "every_epochs": None},
}
BENCH_TOKEN = "rankzero-bench-token-0123456789abcdef0123456789"  # the API refuses short tokens
PG_ADMIN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres connect_timeout=3"


def _first_step_time(events: Path, timeout: float = 120) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if events.exists():
            for line in events.read_text().splitlines():
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue
                if ev.get("type") in ("progress", "metric") and ev.get("step", 0) >= 1:
                    return float(ev["time"])
        time.sleep(0.02)
    raise TimeoutError(f"no optimizer step in {events} after {timeout} s")


def bare_launch(tmp: Path, i: int) -> float:
    from trainer.run_dir import RunDir
    from worker.launch_command import build_command, rank_env

    run = RunDir(tmp / f"bare{i}")
    run.root.mkdir(parents=True)
    run.spec.write_text(json.dumps(SPEC))
    from worker.launch_command import free_port

    cmd = build_command(run, 0, 1, SPEC["nproc"], free_port())
    t0 = time.time()
    proc = subprocess.Popen(
        cmd, env=rank_env("bench", None), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        return _first_step_time(run.events) - t0
    finally:
        proc.wait(timeout=120)


@contextmanager
def live_service(tmp: Path):
    import httpx
    import uvicorn

    from api.app import create_app
    from cli.serve import settings_env
    from core.settings import Settings
    from worker.launch_command import free_port

    settings = Settings(data_dir=tmp / "data", runs_dir=tmp / "runs", api_token=BENCH_TOKEN, gpus="")
    settings.data_dir.mkdir(parents=True)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    env = settings_env(settings) | {"OMP_NUM_THREADS": "1"}
    log = open(tmp / "worker.log", "wb")  # noqa: SIM115 - the worker subprocess writes it until stopped
    worker = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "worker", "--concurrency", "1"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while b" ready." not in (tmp / "worker.log").read_bytes():
            if time.monotonic() > deadline or worker.poll() is not None:
                raise RuntimeError("the worker did not start; see " + str(tmp / "worker.log"))
            time.sleep(0.1)
        client = httpx.Client(
            base_url=f"http://127.0.0.1:{port}/api", headers={"Authorization": f"Bearer {BENCH_TOKEN}"}, timeout=30
        )
        yield settings, client
    finally:
        os.kill(worker.pid, signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
        server.should_exit = True
        thread.join(10)


def service_launch(settings: Any, client: Any, dispatch: list[float] | None = None) -> float:
    """Submit → step 1; appends submit → torchrun started (the service's own share) to `dispatch`."""
    from datetime import datetime

    t0 = time.time()
    r = client.post("/jobs", json=SPEC)
    r.raise_for_status()
    job_id = r.json()["id"]
    took = _first_step_time(settings.resolved_runs_dir / f"job_{job_id}" / "events.jsonl") - t0
    if dispatch is not None:
        running = [t for t in client.get(f"/jobs/{job_id}").json()["transitions"] if t["status"] == "running"]
        dispatch.append(datetime.fromisoformat(running[0]["at"]).timestamp() - t0)
    deadline = time.monotonic() + 120
    while client.get(f"/jobs/{job_id}").json()["status"] not in ("succeeded", "failed", "cancelled"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"bench job {job_id} did not finish")
        time.sleep(0.1)
    return took


def ingest_rate(database_url: str, n: int) -> float:
    return ingest_measure(database_url, n)["rate"]


def _server_cpu(engine: Any) -> float:
    """CPU seconds used so far by the PostgreSQL backends of `engine`'s database (0 for SQLite, which runs in
    this process and so is in its own CPU time). Read from /proc: the server must be on this machine."""
    from sqlalchemy import text

    if engine.dialect.name != "postgresql":
        return 0.0
    with engine.connect() as conn:
        pids = conn.execute(text("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")).scalars()
        total = 0.0
        for pid in pids:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


@contextmanager
def _timed(engine: Any, into: dict[str, float]):
    """Wall seconds, this process's CPU seconds and the database server's CPU seconds of the block."""
    wall, cpu, server = time.perf_counter(), time.process_time(), _server_cpu(engine)
    yield
    into["wall"] = time.perf_counter() - wall
    into["cpu"] = time.process_time() - cpu
    into["server_cpu"] = _server_cpu(engine) - server


def ingest_measure(database_url: str, n: int) -> dict[str, Any]:
    """Points/s of worker/ingest.py writing `n` metric events (20,000 at a time), then the checks:
    every point stored exactly once, and ingesting the same events again adds nothing — by a fresh
    ingester (a restarted worker: it starts from the row's ingested_seq) and by one that believes
    nothing was ingested yet (a racing or stale ingester: only the (job, seq) key stops it).

    Three timings: the parsed events into the database (`rate`, the issue's figure); the same events
    from an events.jsonl through `EventTail` into the database of a second job (`file`: what the
    supervisor does, JSON parsing included); and folding the first job's points into the chart rollups
    (`fold`, which the supervisor does every FOLD_EVERY_S). Each with wall time and CPU time (this
    process's and the PostgreSQL backends'): the CPU figures do not depend on the machine's load."""
    from sqlalchemy import text
    from sqlmodel import Session

    from core import metric_rollup
    from core.db import get_engine
    from core.migrate import upgrade
    from worker.ingest import Ingestor
    from worker.ingest_events import EventTail

    upgrade(database_url)
    engine = get_engine(database_url)

    def new_job() -> int:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO jobs (name, spec, status, attempt, created_at, step, epoch, samples, ingested_seq) "
                    "VALUES ('bench-ingest', '{}', 'running', 1, CURRENT_TIMESTAMP, 0, 0, 0, -1)"
                )
            )
            return conn.execute(text("SELECT max(id) FROM jobs")).scalar_one()

    job_id = new_job()
    now = time.time()
    events = [
        {
            "seq": i,
            "time": now,
            "type": "metric",
            "step": i // 2,
            "name": ("train/loss", "lr")[i % 2],
            "value": 1.0 / (i + 1),
        }
        for i in range(n)
    ]
    timings: dict[str, dict[str, float]] = {"events": {}, "file": {}, "fold": {}}
    ingestor = Ingestor(engine, job_id)
    with _timed(engine, timings["events"]):
        for start in range(0, n, 20_000):  # as the supervisor sees them: a burst at a time
            ingestor.ingest(events[start : start + 20_000])

    def stored(job: int) -> tuple[int, int]:
        with engine.connect() as conn:
            return tuple(  # type: ignore[return-value]
                conn.execute(
                    text("SELECT count(*), count(DISTINCT seq) FROM metric_points WHERE job_id = :j"), {"j": job}
                ).one()
            )

    first = stored(job_id)
    again = sum(Ingestor(engine, job_id).ingest(events[s : s + 20_000]) for s in range(0, n, 20_000))
    stale = Ingestor(engine, job_id)
    stale.ingested_seq, stale.max_step = -1, {}
    stale.ingest(events[:20_000])  # it counts them as its own (it cannot know better); the table must not
    ok = first == (n, n) and stored(job_id) == (n, n) and again == 0

    with tempfile.TemporaryDirectory(prefix="rankzero-ingest-") as tmp:
        path = Path(tmp) / "events.jsonl"
        path.write_text("".join(json.dumps(e) + "\n" for e in events))
        file_job = new_job()
        tail, from_file = EventTail(path), Ingestor(engine, file_job)
        with _timed(engine, timings["file"]):
            while batch := tail.read():  # 8 MiB a read, as the supervisor's tail
                for start in range(0, len(batch), 20_000):
                    from_file.ingest(batch[start : start + 20_000])
    ok = ok and stored(file_job) == (n, n)

    with _timed(engine, timings["fold"]), Session(engine) as session:
        folded = metric_rollup.refresh(session, job_id)
    ok = ok and folded == n
    return {"rate": n / timings["events"]["wall"], "exactly_once": ok, "stored": first, "n": n, "timings": timings}


def ingest_child(repo: str, database_url: str, n: int) -> dict[str, Any]:
    """`ingest_measure` run by `repo`'s code, in a process of its own."""
    env = {**os.environ, "RANKZERO_BENCH_CODE": repo, "PYTHONPATH": repo}
    out = subprocess.run(
        [sys.executable, __file__, "--ingest-child", database_url, str(n)],
        env=env,
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


_PHASES = {
    "events": "metric ingest (parsed events → database)",
    "file": "metric ingest (events.jsonl → database)",
    "fold": "chart rollups of those points (refresh)",
}


def _phase_figures(runs: list[dict[str, Any]], phase: str) -> tuple[float, float, float]:
    """Median wall points/s, and median µs of CPU a point (this process, then the database server)."""
    walls = [m["n"] / m["timings"][phase]["wall"] for m in runs]
    client = [1e6 * m["timings"][phase]["cpu"] / m["n"] for m in runs]
    server = [1e6 * m["timings"][phase]["server_cpu"] / m["n"] for m in runs]
    return statistics.median(walls), statistics.median(client), statistics.median(server)


def _ingest_runs(tmp: Path, store: str, codes: list[tuple[str, str]], n: int, rounds: int) -> dict[str, list]:
    """`rounds` measurements of each code on `store`, alternating which goes first."""
    got: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in codes}
    for r in range(rounds):
        for label, repo in codes if r % 2 == 0 else codes[::-1]:
            if store == "SQLite":
                got[label].append(ingest_child(repo, f"sqlite:///{tmp / f'ingest-{label}-{r}.db'}", n))
                continue
            with pg_database() as url:
                if url:
                    got[label].append(ingest_child(repo, url, n))
    return got


def _phase_result(this: list[dict[str, Any]], base: list[dict[str, Any]], phase: str) -> tuple[str, float]:
    """One phase's figures, beside the baseline's when there is one; and this code's wall points/s."""
    wall, client, server = _phase_figures(this, phase)
    runs = ", ".join(f"{m['n'] / m['timings'][phase]['wall'] / 1000:.0f}k" for m in this)
    result = f"{wall:,.0f} points/s (runs: {runs}); CPU {client:.2f} + {server:.2f} µs a point"
    if base:
        b_wall, b_client, b_server = _phase_figures(base, phase)
        result += (
            f"; baseline {b_wall:,.0f} points/s, CPU {b_client:.2f} + {b_server:.2f} µs; "
            f"×{wall / b_wall:.2f} wall, ×{(b_client + b_server) / (client + server):.2f} CPU"
        )
    return result, wall


def ingest_rows(tmp: Path, n: int, rounds: int, baseline: str | None) -> list[tuple[str, str, str, str, str]]:
    """Ingest into SQLite and PostgreSQL by this code (and by `baseline`'s, alternating): rows per phase.

    Wall points/s depend on the machine's load (the client and the server share its cores); the CPU µs a
    point (this process + the PostgreSQL backend) do not, and say what a point costs on a quiet machine:
    there the client and the server work at once, so the wall rate lies between 1 / (client + server)
    and 1 / max(client, server)."""
    codes = [("this", str(ROOT))] + ([("baseline", baseline)] if baseline else [])
    rows = []
    for store in ("SQLite", "PostgreSQL"):
        got = _ingest_runs(tmp, store, codes, n, rounds)
        if not got["this"]:
            continue
        once = all(m["exactly_once"] for m in got["this"])
        for phase, title in _PHASES.items():
            result, wall = _phase_result(got["this"], got.get("baseline", []), phase)
            target, verdict = ("", "")
            if phase == "events":
                result += f"; exactly once: {'yes' if once else 'NO'}"
                if store == "PostgreSQL":
                    target, verdict = "≥ 150,000 points/s", "pass" if wall >= 150_000 and once else "FAIL"
            rows.append((title, store, result, target, verdict))
    return rows


@contextmanager
def pg_database():
    import psycopg

    from core.db import get_engine

    name = f"rankzero_w_bench_{secrets.token_hex(4)}"
    try:
        with psycopg.connect(PG_ADMIN, autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
    except Exception as exc:
        print(f"(PostgreSQL skipped: {exc})", file=sys.stderr)
        yield None
        return
    url = f"postgresql://postgres@127.0.0.1:5432/{name}"
    try:
        yield url
    finally:
        get_engine(url).dispose()
        with psycopg.connect(PG_ADMIN, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def launch_rows(tmp: Path, repeats: int) -> list[tuple[str, str, str, str, str]]:
    """Submit → first step through the service against a bare torchrun launch, interleaved."""
    bares: list[float] = []
    svcs: list[float] = []
    dispatch: list[float] = []
    with live_service(tmp / "svc") as (settings, client):
        bare_launch(tmp, 99)  # warm-up: page cache for torch, first rendezvous
        service_launch(settings, client)
        for i in range(repeats):
            bares.append(bare_launch(tmp, i))
            svcs.append(service_launch(settings, client, dispatch))
    bare, svc = statistics.median(bares), statistics.median(svcs)
    share = statistics.median(dispatch)
    return [
        ("launch → first optimizer step, bare torchrun", "-",
         f"{bare:.2f} s (runs: {', '.join(f'{b:.1f}' for b in bares)})", "", ""),
        ("submit → torchrun started (the service's own share)", "SQLite + embedded broker",
         f"{share:.2f} s (max {max(dispatch):.2f})", "≤ 1.0 s", "pass" if share <= 1.0 else "FAIL"),
        ("submit → first optimizer step, service", "SQLite + embedded broker",
         f"{svc:.2f} s (runs: {', '.join(f'{v:.1f}' for v in svcs)})", f"≤ bare + 1.0 s ({bare + 1.0:.2f} s)",
         "pass" if svc <= bare + 1.0 else "FAIL"),
    ]  # fmt: skip


def query_rows(tmp: Path) -> list[tuple[str, str, str, str, str]]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from metrics_query import measure

    rows = []
    targets = [("SQLite", f"sqlite:///{tmp / 'query.db'}")]
    with pg_database() as url:
        if url:
            targets.append(("PostgreSQL", url))
        for label, db in targets:
            m = measure(db)
            rows.append(
                (
                    "GET metrics, 1,000,000 points, max_points=2000",
                    label,
                    f"{m['query_ms_median']:.0f} ms (max {m['query_ms_max']:.0f})",
                    "≤ 150 ms",
                    "pass" if m["query_ms_median"] <= 150 else "FAIL",
                )
            )
    return rows


def _checkout(rev: str, into: Path) -> Path:
    """This repository's tree at `rev`, unpacked into `into` (the committed code as a baseline)."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", rev], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def main(argv: list[str]) -> None:
    import argparse

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="one repetition, 50,000 points")
    p.add_argument("--ingest-only", action="store_true", help="only the metric ingest rows")
    p.add_argument("--baseline", help="another checkout (e.g. `git archive <rev> | tar -x -C DIR`): its ingest too")
    p.add_argument("--base-rev", help="a git revision of this repository (e.g. HEAD) as the baseline checkout")
    p.add_argument("--rounds", type=int, default=None, help="ingest measurements per code and store (default 3)")
    p.add_argument("--ingest-child", nargs=2, metavar=("URL", "N"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.ingest_child:
        print(json.dumps(ingest_measure(args.ingest_child[0], int(args.ingest_child[1]))))
        return
    repeats = 1 if args.quick else 5
    n_ingest = 50_000 if args.quick else 200_000
    rounds = args.rounds or (1 if args.quick else 3)
    baseline = str(Path(args.baseline).resolve()) if args.baseline else None
    rows: list[tuple[str, str, str, str, str]] = []
    with tempfile.TemporaryDirectory(prefix="rankzero-bench-") as tmpdir:
        tmp = Path(tmpdir)
        if args.base_rev:
            baseline = str(_checkout(args.base_rev, tmp / "base"))
        if not args.ingest_only:
            rows += launch_rows(tmp, repeats)
        rows += ingest_rows(tmp, n_ingest, rounds, baseline)
        if not args.ingest_only:
            rows += query_rows(tmp)
    print()
    print("| measure | store | result | target | |")
    print("|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
