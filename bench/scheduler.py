"""The scheduler's placement decision (core/placement.py `plan`) and, later, submit → first step (issue 10).

    .venv/bin/python bench/scheduler.py [--jobs 1000] [--hosts 50] [--running 200] [--users 20] [--passes 30]
        [--seed 1] [--no-service] [--sizes 1000x50x200,1000x500x2000,10000x500x2000] [--size-rounds 5]

0. Before / after (issue 29): at each of `--sizes` (queued × hosts × running), one pass of today's indexed
   `plan` beside the full pass it replaced (tests/scheduler/placement_reference.py `plan_reference`, the baseline),
   alternating, `--size-rounds` rounds of each, on the same inputs; CPU and wall medians and their ratio.
   Both passes decide the same plan (checked here once per size, and by tests/scheduler/
   test_placement_equivalence.py). Target: ≤ 100 ms CPU at 10 000 × 500 × 2 000. What is timed is the
   pure decision; the pass's SQL reads and writes (worker/scheduler.py) are not in it.
0b. The pass's read (worker/scheduler.py `_read`) of `--read-jobs` queued jobs on SQLite: every spec read
   and validated (as before) beside a pass that knows them (after); the writes are not timed.
1. Placement decision time: one `plan()` pass over `--jobs` queued jobs (mixed sizes, priorities, devices;
   ~15 % elastic, ~8 % multi-node) on `--hosts` simulated hosts (⅗ GPU hosts with 2/4/8 GPUs on two
   shared runs dirs, ⅖ CPU hosts with 8–32 slots; two pools) holding `--running` running jobs (a third
   preemptible). Pure CPU, no service: inputs are built once, outside the timing. Target ≤ 50 ms per pass.
   Rows, all measured in this run (the machine is shared and noisy, so the ratios are what to compare):
     - plan, the full case;
     - plan, all distinct shapes: every job a shape of its own (no two alike: the memo cannot help), the
       worst case for the per-shape caches;
     - plan, 100 jobs: the same hosts and usage, a tenth of the queue;
     - plan, fair share + quotas (issue 23): the full case's jobs and running jobs owned by `--users` users
       (round robin), each member with a quota (8 GPUs, 32 slots) and a recorded usage, the pass ordering
       equal priorities by fair share and holding back jobs past their owner's quota;
     - naive first fit: the baseline, one loop over jobs × hosts taking the first host with room (no
       best fit, gang, reservations, elastic, preemption or reasons): the floor of any per-job pass.
   Each row: median / p95 / max over `--passes` passes, and its median as a ratio of the full case's.
2. submit → first step, 2-node vs 1-node of the same world size: a live API and two workers posing as
   host-a and host-b (bench/service.py's harness), alternating; `--no-service` skips it.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dataclasses import replace  # noqa: E402

from core.placement import HostView, NodeUse, Team, Usage, Waiting, plan  # noqa: E402
from core.quotas import Quota  # noqa: E402
from tests.scheduler.placement_reference import plan_reference  # noqa: E402
from trainer.spec import JobSpec  # noqa: E402

TARGET_MS = 50.0
SIZES_TARGET_MS = {(10_000, 500, 2_000): 100.0}  # issue 29


def make_hosts(n: int, rng: random.Random) -> list[HostView]:
    hosts = []
    for i in range(n):
        pool = "big" if i % 10 == 9 else "default"
        if i % 5 < 3:
            gpus = tuple(str(g) for g in range(rng.choice([2, 4, 4, 8, 8])))
            hosts.append(HostView(f"gpu-{i:03d}", pool, gpus, 16, f"nfs-{i % 2}"))
        else:
            hosts.append(HostView(f"cpu-{i:03d}", pool, (), rng.choice([8, 16, 32]), "nfs-0"))
    return hosts


def make_usage(hosts: Sequence[HostView], n: int, rng: random.Random) -> list[Usage]:
    """About `n` running jobs, each on one host, never beyond its capacity."""
    free = {h.name: list(h.gpus) for h in hosts}
    slots = {h.name: h.cpu_slots for h in hosts}
    usage: list[Usage] = []
    for job_id in range(1_000_000, 1_000_000 + n * 3):
        if len(usage) >= n:
            break
        host = rng.choice(hosts)
        want = rng.choice([1, 1, 2, 4])
        if host.gpus and len(free[host.name]) >= want:
            gpus, free[host.name] = tuple(free[host.name][:want]), free[host.name][want:]
            node = NodeUse(host.name, gpus, 0)
        elif slots[host.name] >= want:
            slots[host.name] -= want
            node = NodeUse(host.name, (), want)
        else:
            continue
        usage.append(Usage(job_id, rng.randint(-5, 5), rng.random() < 0.33, (node,)))
    return usage


def _fields(rng: random.Random) -> dict[str, object]:
    fields: dict[str, object] = {
        "nproc": rng.choice([1, 1, 1, 2, 2, 4, 4, 8]),
        "device": rng.choice(["auto", "auto", "cuda", "cpu"]),
        "accumulation_steps": rng.choice([1, 1, 2]),
        "priority": rng.choice([-5, 0, 0, 0, 0, 1, 5, 10]),
        "preemptible": rng.random() < 0.3,
    }
    roll = rng.random()
    if roll < 0.15:
        fields["min_nproc"] = 1
    elif roll < 0.23:
        fields["nnodes"] = rng.choice([2, 2, 3, 4])
        fields["nproc"] = rng.choice([1, 2, 4])
    elif roll < 0.25 and fields["device"] != "cpu":
        fields.update(sync="dataparallel", nproc=1)
    return fields


def make_waiting(n: int, rng: random.Random, distinct: bool = False) -> list[Waiting]:
    jobs = []
    for job_id in range(1, n + 1):
        fields = _fields(rng)
        if distinct:  # a shape of its own: (nproc, accumulation) differs for every job, elastic
            fields.update(nproc=rng.choice([1, 2, 4, 8]), nnodes=1, sync="ddp", min_nproc=1)
            fields["accumulation_steps"] = job_id % 1024 + 1
        spec = JobSpec(max_steps=100, **fields)
        pool = "big" if rng.random() < 0.1 else "default"
        jobs.append(Waiting(job_id, pool, spec.priority, 1_700_000_000.0 + rng.random() * 86_400, spec))
    return jobs


def naive_first_fit(waiting: Sequence[Waiting], hosts: Sequence[HostView], usage: Sequence[Usage]) -> int:
    """The baseline: jobs in queue order, the first host with room, single node, no reasons."""
    gpus = {h.name: len(h.gpus) for h in hosts}
    slots = {h.name: h.cpu_slots for h in hosts}
    for use in usage:
        for node in use.nodes:
            gpus[node.host] -= len(node.gpus)
            slots[node.host] -= node.slots
    started = 0
    for job in sorted(waiting, key=lambda j: (-j.priority, j.created_at, j.job_id)):
        want = job.spec.nproc
        for host in hosts:
            if host.pool != job.pool or host.draining:
                continue
            room = gpus if host.gpus and job.spec.device != "cpu" else slots
            if room[host.name] >= want:
                room[host.name] -= want
                started += 1
                break
    return started


def time_passes(fn: Callable[[], object], passes: int) -> tuple[list[float], list[float]]:
    """Wall and CPU milliseconds of each pass (CPU time is what a loaded machine does not inflate)."""
    fn()  # warm-up
    wall, cpu = [], []
    for _ in range(passes):
        gc.collect()
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        cpu.append((time.process_time() - start_cpu) * 1000)
        wall.append((time.perf_counter() - start) * 1000)
    return wall, cpu


def _p95(xs: list[float]) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def _verdict(times: list[float]) -> str:
    return "ok" if _p95(times) <= TARGET_MS else "OVER"


def _one_cpu_ms(fn: Callable[[], object]) -> tuple[float, float]:
    gc.collect()
    start, start_cpu = time.perf_counter(), time.process_time()
    fn()
    return (time.process_time() - start_cpu) * 1000, (time.perf_counter() - start) * 1000


def before_after(args: argparse.Namespace) -> None:
    """The indexed pass beside the full pass it replaced, at each size, alternating rounds."""
    print(
        "\n0. one placement pass, before (tests/scheduler/placement_reference.py, the full pass) and after "
        "(core/placement.py)\n"
        f"   {args.size_rounds} alternating rounds of each after a warm-up; medians; ms\n"
    )
    print(
        f"{'queued × hosts × running':<26} {'places':>6} {'before cpu':>10} {'after cpu':>10} {'÷':>6} "
        f"{'before wall':>11} {'after wall':>10} {'÷':>6}  target"
    )
    for size in args.sizes.split(","):
        jobs, hosts_n, running = (int(x) for x in size.split("x"))
        rng = random.Random(args.seed)
        hosts = make_hosts(hosts_n, rng)
        usage = make_usage(hosts, running, rng)
        waiting = make_waiting(jobs, rng)
        after_plan, before_plan = plan(waiting, hosts, usage), plan_reference(waiting, hosts, usage)  # warm-up
        if after_plan != before_plan:
            raise SystemExit(f"at {size} the indexed pass decided otherwise than the full pass: a bug")
        times: dict[str, list[tuple[float, float]]] = {"before": [], "after": []}
        for _ in range(args.size_rounds):
            times["before"].append(_one_cpu_ms(lambda w=waiting, h=hosts, u=usage: plan_reference(w, h, u)))
            times["after"].append(_one_cpu_ms(lambda w=waiting, h=hosts, u=usage: plan(w, h, u)))
        cpu = {k: statistics.median(t[0] for t in v) for k, v in times.items()}
        wall = {k: statistics.median(t[1] for t in v) for k, v in times.items()}
        target = SIZES_TARGET_MS.get((jobs, hosts_n, running))
        verdict = "" if target is None else f"≤ {target:.0f} ms cpu: {'ok' if cpu['after'] <= target else 'OVER'}"
        label = f"{jobs:,} × {hosts_n} × {running:,}"
        print(
            f"{label:<26} {len(after_plan.placements):>6} {cpu['before']:>10.1f} {cpu['after']:>10.1f} "
            f"{cpu['before'] / cpu['after']:>6.1f} {wall['before']:>11.1f} {wall['after']:>10.1f} "
            f"{wall['before'] / wall['after']:>6.1f}  {verdict}"
        )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"÷: before / after. Load average now {load:.1f} on {os.cpu_count()} CPUs (CPU time is what load inflates "
        "least)"
    )


def pass_reads(args: argparse.Namespace) -> None:
    """The pass's read (worker/scheduler.py `_read`: hosts, and every job that holds or wants capacity) on a
    SQLite database of `--read-jobs` queued jobs: each spec read and validated every pass (as before the
    scheduler kept them) beside a pass that finds them all known; alternating rounds, CPU ms."""
    import tempfile
    from datetime import datetime, timezone

    from sqlalchemy import insert

    from core import migrate
    from core.db import get_engine
    from core.settings import Settings
    from core.tables import Job
    from worker import scheduler

    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp) / "data", runs_dir=Path(tmp) / "runs")
        settings.data_dir.mkdir(parents=True)
        url = settings.resolved_database_url
        migrate.upgrade(url)
        engine = get_engine(url)
        now = datetime.now(timezone.utc)
        rows = []
        for job in make_waiting(args.read_jobs, rng):
            spec = job.spec.model_dump(mode="json")
            rows.append({"name": f"job-{job.job_id}", "spec": spec, "status": "queued", "priority": job.priority,
                         "queue": job.pool, "created_at": now})  # fmt: skip
        with engine.begin() as conn:
            conn.execute(insert(Job), rows)
        scheduler._read(engine, settings)  # warm-up
        times: dict[str, list[float]] = {"every spec read and validated (before)": [], "specs known (after)": []}
        for _ in range(args.size_rounds):
            scheduler._SPECS.known.clear()
            times["every spec read and validated (before)"].append(
                _one_cpu_ms(lambda: scheduler._read(engine, settings))[0]
            )
            times["specs known (after)"].append(_one_cpu_ms(lambda: scheduler._read(engine, settings))[0])
        engine.dispose()
    before, after = (statistics.median(v) for v in times.values())
    print(f"\n0b. the pass's read of {args.read_jobs:,} queued jobs (SQLite), CPU ms, medians of {args.size_rounds}")
    for name, xs in times.items():
        print(f"{name:<42} {statistics.median(xs):>8.1f}")
    print(f"÷ {before / after:.1f}")


def placement_decision(args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    hosts = make_hosts(args.hosts, rng)
    usage = make_usage(hosts, args.running, rng)
    waiting = make_waiting(args.jobs, rng)
    distinct = make_waiting(args.jobs, random.Random(args.seed + 1), distinct=True)
    full = plan(waiting, hosts, usage)
    owned = [replace(w, owner=w.job_id % args.users + 1) for w in waiting]
    owned_usage = [replace(u, owner=u.job_id % args.users + 1) for u in usage]
    team = Team(
        quotas={uid: Quota(f"user{uid}", max_gpus=8, max_slots=32) for uid in range(2, args.users + 1)},  # 1: admin
        usage={uid: rng.random() * 50_000 for uid in range(1, args.users + 1)},
    )
    fair = plan(owned, hosts, owned_usage, team)
    print(
        f"\n1. placement decision: {len(waiting)} queued, {len(hosts)} hosts "
        f"({sum(1 for h in hosts if h.gpus)} GPU, {sum(len(h.gpus) for h in hosts)} GPUs, "
        f"{sum(h.cpu_slots for h in hosts if not h.gpus)} CPU slots), {len(usage)} running "
        f"({sum(u.preemptible for u in usage)} preemptible); one pass places {len(full.placements)} "
        f"({sum(p.elastic for p in full.placements)} elastic, {sum(len(p.nodes) > 1 for p in full.placements)} "
        f"multi-node), preempts {len(full.preempt)}, leaves {len(full.pending)} pending\n"
    )
    rows = [
        (f"plan, {len(waiting)} jobs", lambda: plan(waiting, hosts, usage)),
        (f"plan, {len(distinct)} jobs, all distinct shapes", lambda: plan(distinct, hosts, usage)),
        (f"plan, {len(waiting) // 10} jobs", lambda: plan(waiting[: len(waiting) // 10], hosts, usage)),
        (f"plan, fair share + quotas, {args.users} users", lambda: plan(owned, hosts, owned_usage, team)),
        (f"naive first fit, {len(waiting)} jobs (baseline)", lambda: naive_first_fit(waiting, hosts, usage)),
    ]
    results = [(name, *time_passes(fn, args.passes)) for name, fn in rows]
    base = statistics.median(results[0][1])
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"target ≤ {TARGET_MS:.0f} ms per pass. This machine: {os.cpu_count()} CPUs, load average {load:.1f} at the "
        "start;\nwall time counts waiting for a CPU on a loaded machine, 'cpu' is this process's CPU time (what the "
        "pass costs)."
    )
    print(f"{'case':<44} {'median':>8} {'p95':>8} {'max':>8} {'cpu med':>8} {'cpu p95':>8} {'× full':>7}")
    for name, wall, cpu in results:
        med = statistics.median(wall)
        verdict = ""
        if name.startswith("plan"):
            verdict = f"wall {_verdict(wall)}, cpu {_verdict(cpu)}"
        print(
            f"{name:<44} {med:>8.2f} {_p95(wall):>8.2f} {max(wall):>8.2f} {statistics.median(cpu):>8.2f} "
            f"{_p95(cpu):>8.2f} {med / base:>7.2f}  {verdict}"
        )
    print(
        f"\nms; {args.passes} passes per row after one warm-up, gc collected before each; × full: wall median / the "
        "full case's;\nok/OVER: p95 (wall, cpu) against the target"
    )
    quota_waits = sum(1 for r in fair.pending.values() if r.startswith("quota:"))
    print(
        f"fair share + quotas: places {len(fair.placements)}, {quota_waits} of {len(fair.pending)} pending wait for "
        "their owner's quota"
    )
    print("Sample pending reasons:")
    for job_id, reason in list(full.pending.items())[:: max(1, len(full.pending) // 5)][:5]:
        print(f"  job {job_id}: {reason}")


# ---------------------------------------------------------------------------------------------------------
# 2. submit → first step, 2-node vs 1-node (to be filled by the scheduler-loop work)


def submit_to_first_step(args: argparse.Namespace) -> None:
    """Submit → first optimizer step for an `nnodes: 2, nproc: 1` job vs an `nproc: 2` job (same world size),
    on a live API with two workers posing as host-a and host-b (2 CPU slots each, SQLite, embedded broker),
    alternating, `--starts` of each; medians and the ratio."""
    import tempfile

    sys.path.insert(0, str(ROOT / "bench"))
    from service import SPEC, _first_step_time  # the service benchmark's spec and first-step reader

    print(f"\n2. submit → first step, 2-node vs 1-node (world size 2; {args.starts} of each, alternating)")
    times: dict[str, list[float]] = {"1 node × 2 ranks": [], "2 nodes × 1 rank": []}
    with tempfile.TemporaryDirectory() as tmp, two_hosts(Path(tmp)) as (settings, client):
        for _ in range(args.starts):
            for label, shape in (("1 node × 2 ranks", {"nproc": 2}), ("2 nodes × 1 rank", {"nproc": 1, "nnodes": 2})):
                t0 = time.time()
                r = client.post("/jobs", json={**SPEC, **shape})
                r.raise_for_status()
                job_id = r.json()["id"]
                events = settings.resolved_runs_dir / f"job_{job_id}" / "events.jsonl"
                times[label].append(_first_step_time(events) - t0)
                _wait_done(client, job_id)
    base = statistics.median(times["1 node × 2 ranks"])
    print(f"{'case':<20} {'median s':>9} {'min s':>7} {'max s':>7} {'× 1 node':>9}")
    for label, xs in times.items():
        print(f"{label:<20} {statistics.median(xs):>9.2f} {min(xs):>7.2f} {max(xs):>7.2f} "
              f"{statistics.median(xs) / base:>9.2f}")  # fmt: skip


@contextmanager
def two_hosts(tmp: Path) -> Iterator[tuple[Any, Any]]:
    """A live API (uvicorn in a thread) and two `rankzero worker`s as host-a and host-b, 2 slots each."""
    import httpx
    import uvicorn

    from api.app import create_app
    from cli.serve import settings_env
    from core.settings import Settings
    from worker.launch_command import free_port

    token = "rankzero-bench-token-0123456789abcdef0123456789"
    settings = Settings(data_dir=tmp / "data", runs_dir=tmp / "runs", api_token=token, gpus="", cpu_slots=2)
    settings.data_dir.mkdir(parents=True)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    workers = []
    for host in ("host-a", "host-b"):
        env = settings_env(settings) | {"OMP_NUM_THREADS": "1", "RANKZERO_HOST_NAME": host}
        with open(tmp / f"{host}.log", "wb") as log:
            workers.append(subprocess.Popen([sys.executable, "-m", "cli.main", "worker", "--concurrency", "2"],
                                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True))  # fmt: skip
    try:
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}/api", headers={"Authorization": f"Bearer {token}"},
                              timeout=30)  # fmt: skip
        deadline = time.monotonic() + 90
        while len([h for h in client.get("/hosts").json() if h["alive"]]) < 2:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the workers did not register; see {tmp}/host-*.log")
            time.sleep(0.2)
        yield settings, client
    finally:
        for w in workers:
            os.killpg(w.pid, signal.SIGTERM)
        for w in workers:
            try:
                w.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(w.pid, signal.SIGKILL)
        server.should_exit = True
        thread.join(10)


def _wait_done(client: object, job_id: int, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while client.get(f"/jobs/{job_id}").json()["status"] not in ("succeeded", "failed", "cancelled"):  # type: ignore[attr-defined]
        if time.monotonic() > deadline:
            raise TimeoutError(f"bench job {job_id} did not finish")
        time.sleep(0.1)


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--hosts", type=int, default=50)
    p.add_argument("--running", type=int, default=200)
    p.add_argument("--passes", type=int, default=30)
    p.add_argument("--users", type=int, default=20, help="owners of the jobs in the fair-share row")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--starts", type=int, default=3, help="submit → first step runs of each shape")
    p.add_argument("--no-service", action="store_true", help="only the placement pass (sections 0 and 1)")
    p.add_argument(
        "--sizes",
        default="1000x50x200,1000x500x2000,10000x500x2000",
        help="queued x hosts x running, comma-separated, for the before/after table (section 0)",
    )
    p.add_argument("--size-rounds", type=int, default=5, help="rounds of each pass per size in section 0")
    p.add_argument("--read-jobs", type=int, default=10_000, help="queued jobs for the pass's read (0: skip it)")
    args = p.parse_args(argv)
    if args.sizes:
        before_after(args)
    if args.read_jobs:
        pass_reads(args)
    placement_decision(args)
    if not args.no_service:
        submit_to_first_step(args)


if __name__ == "__main__":
    main(sys.argv[1:])
