"""A simulated cluster against the real service (issue 42 item 2): does the API, the scheduler and PostgreSQL
hold up at 500 hosts × 4 GPUs, 2,000 running jobs and 10,000 queued ones?

    nice -n 19 .venv/bin/python bench/cluster_sim.py            # 1/10 scale (the baseline), then full scale
    nice -n 19 .venv/bin/python bench/cluster_sim.py --small    # quick: 20 hosts, 50 running, 200 queued, 30 s
        [--hosts 500] [--running 2000] [--queued 10000] [--points-per-s 10] [--series 5] [--dashboards 50]
        [--cli-users 20] [--window-s 60] [--baseline-fraction 0.1] [--sim-procs 2] [--job-s 300] [--keep-logs]

What runs for real, each phase on a PostgreSQL database of its own (127.0.0.1:5432, dropped after) and a Redis
db of its own (127.0.0.1:6379, `--redis-db`, this run's queue names only):

- the API: `rankzero api` (uvicorn, one process), as a user starts it;
- the scheduler: its own process running the real loop (worker/scheduler.py `start_scheduler_thread`: the lease,
  LISTEN/NOTIFY wake-ups, `schedule_once`, retention) and one recovery sweep (worker/recover.py), as the leading
  worker runs them; `schedule_once` is wrapped only to time each pass (its thread's CPU time);
- the hosts: `--sim-procs` processes, each playing a share of the hosts with the workers' own functions, never
  SQL of its own: `core.hosts.register` and `beat` every heartbeat_s; the scheduler's node messages taken from
  each host's Celery queue on Redis (`core.hosts.host_queue`, consumed with kombu); the checks of
  worker/supervise.py and `core.jobs.claim` + `mark_running`; then, every second as node 0's supervisor does on
  PostgreSQL (worker/wakeups.py: ROW_EVERY_S, FILES_GAP_S), the row read (`jobs.live_view`) and the events
  written since (`worker.ingest.Ingestor.ingest`: metric points batched per job, with `progress`), the job's
  heartbeat (`jobs.touch_live`) every heartbeat_s, the `sys/…` samples (`Ingestor.ingest_metrics`) every
  heartbeat_s, the rollup fold (`worker.watch.fold_rollups`) every FOLD_EVERY_S, and at the job's end
  `worker.outcome.apply(Finish)` and the scheduler's wake-up. Only the training is mocked: the events are made
  in memory at `--points-per-s` (one series carries its own send time, for the dashboards' freshness);
- users, from this process: `--dashboards` live job pages (the SSE route GET /api/jobs/{id}/stream, read with
  httpx), `--cli-users` CLI users polling GET /api/jobs, GET /api/jobs/{id} and now and then GET /api/hosts
  with the API token, and a submitter (POST /api/jobs) replacing finished jobs so the queue stays full.

The cluster is full by design: the hosts' GPUs add up to `--running` (500 × 4 = 2,000), every job takes one GPU,
so the `--queued` jobs wait; each job runs a random 0–2 × `--job-s` (mean `--job-s`), so jobs finish, are
claimed and submitted all through the window. The jobs are seeded with one bulk INSERT (12,000 POSTs would take
minutes), as a queue that has waited a while: each with the reason the scheduler gives it on this full fleet
(else its first pass writes 12,000 reasons, one transaction each, as after a burst of submits); the scheduler
starts once every host has registered; everything after goes through the service. A window's numbers are
steady state only once the ramp reached the jobs (the table says how many ran).

Measured over `--window-s` once the jobs run (after a ramp), and printed as one table beside the same run at
`--baseline-fraction` of the scale (the baseline, measured first in the same run: the machine is shared and
noisy): API p50/p99 per route; the scheduler pass's CPU (p50/p99, and how many jobs it saw waiting); heartbeat
lag (a host's beat committed minus when it was due, its last beat + heartbeat_s) p50/p99/max; false host losses
(hosts the service reads as not alive while their heartbeat runs: must be 0) and jobs requeued for a lost host;
metric points offered and written per second; the dashboards' freshness (a point's making to its arrival on the
stream); PostgreSQL's CPU (/proc of this database's backends, and of every server process); database growth
per hour (pg_database_size); CPU per process (API, scheduler, simulator, this process), the machine's load;
and which process, if any, is the limit.

Not simulated (so not measured): the training itself, torchrun, rank processes and events.jsonl on disk (the
events reach the real Ingestor in memory: the file tail and inotify wake-ups are not exercised); a host's own
CPU (hundreds of hosts share `--sim-procs` processes and their connection pools: a real fleet opens many more
PostgreSQL connections); each worker's other loops (its scheduler candidate's lease try every
scheduler_poll_s, its own recovery sweep every stale/2 — one sweep runs here —, host watch, webhook sender);
multi-node jobs and followers, preemption, cancels, elastic fits, checkpoints and artifacts, logs and the
console, TensorBoard, rank progress, GPU leases, sandboxes, environments and code bundles; Celery's late ack
(a node message is acked at claim, by kombu, not a Celery worker); a dashboard's other requests (chart
history, logs); users at addresses of their own (all are the admin at 127.0.0.1 here, so the per-client caps on
streams and connections are raised); the network (all on loopback) and a proxy in front of the API.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import os
import random
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PY = sys.executable
TOKEN = "rankzero-cluster-sim-token-" + "0123456789abcdef" * 2
PG_ADMIN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres connect_timeout=3"
CONFIG_ENV = "RZ_CLUSTER_SIM_CONFIG"  # a hosts process's share of the fleet, as JSON
TICK = os.sysconf("SC_CLK_TCK")
SENT_AT = "sim/sent_at"  # the series whose value is when its point was made: the dashboards' freshness
SATURATED = 0.9  # of one core: a process this busy is a limit (Python runs one thread at a time)
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"  # cli/service_commands.py `scheduler`'s
T = TypeVar("T")


# --- the scale --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scale:
    hosts: int
    running: int  # the hosts' GPUs add up to this: a full cluster
    queued: int
    points_per_s: float  # each running job's metric points a second
    series: int  # metric names per step (points_per_s / series steps a second)
    dashboards: int
    cli_users: int
    window_s: float
    job_s: float  # mean run time of a job (each a random 0 to 2 × this)

    def part(self, fraction: float, window_s: float) -> Scale:
        """The same cluster at `fraction` of its hosts, jobs and users (the baseline), measured for `window_s`."""

        def cut(n: int) -> int:
            return max(1, round(n * fraction))

        return replace(self, hosts=cut(self.hosts), running=cut(self.running), queued=cut(self.queued),
                       dashboards=cut(self.dashboards), cli_users=cut(self.cli_users), window_s=window_s)  # fmt: skip

    def label(self) -> str:
        return f"{self.hosts} hosts, {self.running:,} running, {self.queued:,} queued"


def gpu_counts(hosts: int, gpus: int) -> list[int]:
    """GPUs of each host so that they add up to `gpus`, spread as evenly as they can be."""
    base, extra = divmod(gpus, hosts)
    return [base + (1 if i < extra else 0) for i in range(hosts)]


def percentile(xs: list[float], q: float) -> float:
    """The q-th percentile (0–100), nearest rank; NaN for no samples."""
    if not xs:
        return math.nan
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def share(pids_ticks: dict[int, tuple[int, int]]) -> float:
    """CPU ticks used between the first and last look at each process (first: ticks then; a process first seen
    later counts from 0, as it started in between)."""
    return float(sum(last - first for first, last in pids_ticks.values()))


# --- /proc ------------------------------------------------------------------------------------------------


def proc_ticks(pid: int) -> int | None:
    """User + system CPU ticks of one process (None: gone)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])


def parent_of(pid: int) -> int | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(raw[raw.rindex(")") + 2 :].split()[1])


def children_of(ppid: int) -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and parent_of(int(p.name)) == ppid]


def machine_busy() -> tuple[int, int]:
    """(busy, total) ticks of every CPU since boot (/proc/stat)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return sum(values) - idle, sum(values)


class CpuWatch:
    """CPU ticks of a changing set of processes, looked at every few seconds (a PostgreSQL backend may come and
    go within the window: its last look counts)."""

    def __init__(self) -> None:
        self.seen: dict[int, tuple[int, int]] = {}  # pid -> (ticks at first look, ticks at last look)
        self.started = False

    def look(self, pids: list[int]) -> None:
        for pid in pids:
            now = proc_ticks(pid)
            if now is None:
                continue
            first = self.seen[pid][0] if pid in self.seen else (now if not self.started else 0)
            self.seen[pid] = (first, now)
        self.started = True

    def cores(self, seconds: float) -> float:
        return share(self.seen) / TICK / seconds


# --- PostgreSQL and Redis ---------------------------------------------------------------------------------


@contextlib.contextmanager
def pg_database() -> Iterator[tuple[str, str]]:
    """A database of this run's own: (its URL, its name); dropped (its connections ended) at the end."""
    import psycopg
    from psycopg import sql

    name = f"rz_sim_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as c:
        c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield f"postgresql://postgres@127.0.0.1:5432/{name}", name
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as c:
            c.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def pg_backends(admin: Any, database: str) -> list[int]:
    rows = admin.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", (database,)).fetchall()
    return [int(r[0]) for r in rows]


def postmaster(admin: Any) -> int | None:
    """The PostgreSQL server's main process: the parent of the admin connection's backend."""
    pid = admin.execute("SELECT pg_backend_pid()").fetchone()[0]
    return parent_of(int(pid))


def clean_redis(db: int, queue: str) -> None:
    """This run's keys only: its hosts' queues and kombu's bindings of them."""
    import redis

    r = redis.Redis(host="127.0.0.1", port=6379, db=db, socket_timeout=10)
    for pattern in (f"{queue}*", f"_kombu.binding*.{queue}.*"):  # kombu: binding and binding_permanent
        keys = list(r.scan_iter(match=pattern, count=1000))
        if keys:
            r.delete(*keys)
    r.close()


# --- the hosts (`--role hosts`): a share of the fleet in one process ----------------------------------------


@dataclass
class HostsConfig:
    hosts: list[str]
    gpus: list[int]
    points_per_s: float
    series: int
    job_s: float
    db_threads: int
    seed: int


@dataclass
class HostsStats:
    """What a hosts process counted, by wall-clock second (the window is cut from it afterwards)."""

    # Each job's mocked training, (start, end): the points it offered are points_per_s over it, whether or not its
    # supervisor kept up (a late look makes them late, it does not unmake them).
    runs: list[tuple[float, float]] = field(default_factory=list)
    looks: list[tuple[float, float]] = field(default_factory=list)  # (at, s since the job's previous look)
    written: dict[int, int] = field(default_factory=dict)  # metric points committed (by commit time)
    sys_written: dict[int, int] = field(default_factory=dict)
    claims: dict[int, int] = field(default_factory=dict)
    finishes: dict[int, int] = field(default_factory=dict)
    lags: list[tuple[float, float]] = field(default_factory=list)  # (beat committed at, lag s)
    errors: dict[str, int] = field(default_factory=dict)

    def add(self, what: dict[int, int], at: float, n: int = 1) -> None:
        what[int(at)] = what.get(int(at), 0) + n


@dataclass
class SimJob:
    """One running job's mocked training: its events are made on demand, as many as its pace says by now."""

    job_id: int
    attempt: int
    host: str
    started: float
    ends: float
    steps_per_s: float
    series: int
    seq: int = 0
    step: int = 0  # steps already made
    unwritten: list[dict[str, Any]] = field(default_factory=list)  # a failed look's events

    def events(self, until: float) -> list[dict[str, Any]]:
        """The events of the steps due by `until` (wall time): `series` metric points and a progress event a step."""
        due = int((min(until, self.ends) - self.started) * self.steps_per_s)
        out: list[dict[str, Any]] = []
        if self.seq == 0:
            out.append(self.event("started", self.started, total_steps=10**9, start_step=0))
        for step in range(self.step + 1, due + 1):
            at = self.started + step / self.steps_per_s
            out.append(self.event("metric", at, step=step, name=SENT_AT, value=at))
            out.append(self.event("metric", at, step=step, name="train/loss", value=1.0 / step))
            out += [
                self.event("metric", at, step=step, name=f"sim/m{i}", value=float(i)) for i in range(2, self.series)
            ]
            out.append(self.event("progress", at, step=step, samples=step * 32, samples_per_s=32 * self.steps_per_s))
        self.step = max(self.step, due)
        out, self.unwritten = [*self.unwritten, *out], []
        return out

    def requeue(self, events: list[dict[str, Any]]) -> None:
        """Events a look could not write: read again at the next one (they are still in events.jsonl)."""
        self.unwritten = [ev for ev in events if ev["type"] != "finished"]

    def event(self, kind: str, at: float, **fields: Any) -> dict[str, Any]:
        self.seq += 1
        return {"seq": self.seq, "time": at, "type": kind, **fields}


class Fleet:
    """The hosts of one process: their heartbeats, their node messages and their jobs, on an asyncio loop; every
    database call in a thread (the workers' functions are synchronous), heartbeats in a pool of their own so a
    backlog of ingests never holds a beat back."""

    def __init__(self, config: HostsConfig) -> None:
        from core.settings import get_settings

        self.config = config
        self.base = get_settings()
        self.rng = random.Random(config.seed)
        self.stats = HostsStats()
        self.stop = asyncio.Event()
        self.jobs_pool = ThreadPool(config.db_threads)
        self.beat_pool = ThreadPool(4)
        self.claim_pool = ThreadPool(2)  # a real node's claim is its own task's, not behind other jobs' looks
        self.active: dict[int, SimJob] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.settings = {h: self.base.model_copy(update={"host_name": h, "host_address": h}) for h in config.hosts}

    async def nap(self, seconds: float) -> bool:
        """Sleep `seconds` (at most); True when the process is stopping."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.stop.wait(), max(0.0, seconds))
        return self.stop.is_set()

    def error(self, what: str) -> None:
        self.stats.errors[what] = self.stats.errors.get(what, 0) + 1

    async def run(self) -> None:
        from core import hosts

        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, self.stop.set)
        for name, gpus in zip(self.config.hosts, self.config.gpus, strict=True):
            await self.beat_pool.call(hosts.register, self.settings[name], [str(g) for g in range(gpus)])
        for name in self.config.hosts:
            self.spawn(self.heartbeat(name))
        consumer = threading.Thread(target=self.consume, args=(loop,), name="sim-consumer", daemon=True)
        consumer.start()
        await self.stop.wait()
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        now = time.time()
        self.stats.runs += [(job.started, min(now, job.ends)) for job in self.active.values()]
        consumer.join(10)

    def spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def heartbeat(self, name: str) -> None:
        """worker/lifecycle.py's loop: a beat heartbeat_s after the last one ended; lag = ended − due."""
        from core import hosts

        period = self.base.heartbeat_s
        last = time.time() - self.rng.uniform(0, period)  # the fleet's beats spread over the period
        while True:
            due = last + period
            if await self.nap(due - time.time()):
                return
            try:
                await self.beat_pool.call(hosts.beat, self.settings[name])
            except Exception as exc:  # the real loop logs and tries at the next beat
                self.error(f"heartbeat: {type(exc).__name__}")
            last = time.time()
            self.stats.lags.append((last, last - due))

    def consume(self, loop: asyncio.AbstractEventLoop) -> None:
        """The node messages the scheduler sends each host (on its own Celery queue), handed to the loop."""
        import socket

        from core import hosts, queue

        app = queue.make_celery(self.base)
        names = {hosts.host_queue(self.base.queue, h): h for h in self.config.hosts}
        queues = [app.amqp.queues[q] for q in names]  # declared as the scheduler's send_task declares them

        def on_message(body: Any, message: Any) -> None:
            args = body[0] if isinstance(body, list) else body.get("args", [])
            host = names.get(message.delivery_info.get("routing_key", ""), "")
            message.ack()  # a real worker acks when the node's task returns (acks_late); the claim fences copies
            loop.call_soon_threadsafe(lambda: self.spawn(self.run_node(host, int(args[0]), int(args[1]), str(args[2]))))

        with app.connection_for_read() as conn, conn.Consumer(queues, callbacks=[on_message], accept=["json"]):
            while not self.stop.is_set():
                with contextlib.suppress(socket.timeout, TimeoutError):
                    conn.drain_events(timeout=1.0)

    async def run_node(self, host: str, job_id: int, node_rank: int, placement_id: str) -> None:
        if node_rank != 0:  # every simulated job is single-node
            self.error("a node message for node rank > 0")
            return
        try:
            attempt = await self.claim_pool.call(claim_node, self.settings[host], job_id, placement_id)
        except Exception as exc:
            self.error(f"claim: {type(exc).__name__}")
            return
        if isinstance(attempt, str):
            self.error(f"claim {attempt}")
            return
        self.stats.add(self.stats.claims, time.time())
        steps = self.config.points_per_s / self.config.series
        now = time.time()
        job = SimJob(job_id, attempt, host, now, now + self.rng.uniform(0, 2 * self.config.job_s), steps,
                     self.config.series)  # fmt: skip
        self.active[job_id] = job
        try:
            await self.supervise(job)
        except Exception as exc:  # the real supervisor would stop the ranks and record why; here: counted
            self.error(f"supervise: {type(exc).__name__}: {str(exc)[:120]}")
        finally:  # cancelled at the end: the run is recorded there
            if not self.stop.is_set():
                self.active.pop(job_id, None)
                self.stats.runs.append((job.started, min(time.time(), job.ends)))

    async def supervise(self, job: SimJob) -> None:
        """Node 0's supervisor, its database calls only, at the cadence it keeps on PostgreSQL."""
        from sqlalchemy.exc import DBAPIError

        from core.db import is_outage
        from worker.wakeups import FILES_GAP_S

        node = await self.jobs_pool.call(Node, self.settings[job.host], job)
        last = None
        while not await self.nap(node.next_look - time.monotonic()):
            now = time.time()
            if last is not None:
                self.stats.looks.append((now, now - last))
            last, began = now, time.monotonic()
            events = job.events(now)
            ending = now >= job.ends
            if ending:
                events.append(job.event("finished", now))
            try:
                new, sys_new, live = await self.jobs_pool.call(node.look, events)
            except DBAPIError as exc:
                if not is_outage(exc):
                    raise
                # As worker/watch.py: a statement or lock timeout is an outage, the events wait for the next look.
                self.error(f"look: {type(exc.orig).__name__}")
                job.requeue(events)
                node.next_look = began + FILES_GAP_S
                continue
            done_at = time.time()
            self.stats.add(self.stats.written, done_at, new)
            self.stats.add(self.stats.sys_written, done_at, sys_new)
            if not live:
                return
            if ending:
                await self.jobs_pool.call(node.finish)
                self.stats.add(self.stats.finishes, time.time())
                return
            node.next_look = began + FILES_GAP_S  # as node 0's cadence: from the look's start, however long it took


def claim_node(settings: Any, job_id: int, placement_id: str) -> int | str:
    """worker/supervise.py `run_node`'s checks and node_zero's claim, without the GPU lease and the launch; the
    attempt number, or why the message was a no-op."""
    from core import jobs
    from core.db import get_engine
    from core.placement_record import read_placement
    from core.tables import JobStatus
    from worker import supervise

    engine = get_engine(settings.resolved_database_url)
    job = jobs.get_job(engine, job_id)
    if job is None or job.status != JobStatus.queued:
        return "no-op: the job is no longer queued"
    if job.placement_id != placement_id or read_placement(job) is None:
        return "no-op: the placement is no longer the job's (placed again)"
    if isinstance(supervise._runnable_spec(engine, job, settings), str):
        return "refused: its spec"
    claimed = jobs.claim(engine, job_id, settings.resolved_runs_dir, host=settings.resolved_host_name,
                         placement_id=placement_id)  # fmt: skip
    if claimed is None:
        return "no-op: claimed by another delivery"
    jobs.mark_running(engine, job_id, os.getpid(), detail=f"simulated attempt {claimed.attempt}",
                      attempt=claimed.attempt)  # fmt: skip
    return int(claimed.attempt)


class Node:
    """What node 0's Watcher keeps between looks (worker/watch.py), for a simulated attempt; each method is one
    look's database work, run in a thread."""

    def __init__(self, settings: Any, job: SimJob) -> None:
        from core.db import get_engine
        from worker.ingest import Ingestor
        from worker.ingest_handlers import SeriesCaps

        self.settings, self.job = settings, job
        self.engine = get_engine(settings.resolved_database_url)
        caps = SeriesCaps(settings.job_max_series, settings.job_max_points_per_series)
        self.ingestor = Ingestor(self.engine, job.job_id, None, attempt=job.attempt, caps=caps)
        self.last_beat = self.last_fold = self.last_sample = time.monotonic()
        self.next_look = time.monotonic()

    def look(self, events: list[dict[str, Any]]) -> tuple[int, int, bool]:
        """Read the row, beat the job's heart when due, write the events and, when due, the `sys/…` samples and
        the rollup fold; (new points, new sys points, the row is still this attempt's)."""
        from core import jobs
        from core.job_state import LIVE
        from worker.watch import FOLD_EVERY_S, fold_rollups

        job, now = self.job, time.monotonic()
        status, attempt, _ = jobs.live_view(self.engine, job.job_id)
        if status not in LIVE or attempt != job.attempt:
            return 0, 0, False
        if now - self.last_beat >= self.settings.heartbeat_s:
            jobs.touch_live(self.engine, job.job_id, attempt=job.attempt)
            self.last_beat = now
        new = self.ingestor.ingest(events)
        sys_new = 0
        if now - self.last_sample >= self.settings.heartbeat_s:  # worker/resources.py samples every heartbeat_s
            sys_new = self.ingestor.ingest_metrics(self.samples(job.step))
            self.last_sample = now
        if new and now - self.last_fold > FOLD_EVERY_S:
            fold_rollups(self.engine, job.job_id)
            self.last_fold = now
        return new, sys_new, True

    @staticmethod
    def samples(step: int) -> list[Any]:
        """One `sys/…` sample as worker/resources.py makes it for a 1-GPU job (values mocked)."""
        at = time.time()
        names = ("sys/rank0/cpu_percent", "sys/cpu_percent_total", "sys/rss_mb_total", "sys/gpu0/util_percent",
                 "sys/gpu0/memory_mb", "sys/gpu0/power_w")  # fmt: skip
        return [{"type": "metric", "name": n, "step": step, "value": 50.0, "time": at} for n in names]

    def finish(self) -> None:
        """The attempt succeeded: worker/outcome.py writes it; the node's task then wakes the scheduler."""
        from core import wake
        from core.tables import JobStatus
        from worker.decide import Finish
        from worker.outcome import apply

        outcome = Finish(JobStatus.succeeded, "simulated job finished", 0, "succeeded")
        apply(self.engine, self.job.job_id, self.job.attempt, outcome)
        wake.notify(self.settings)


class ThreadPool:
    """A bounded pool of threads for blocking calls from the loop."""

    def __init__(self, threads: int) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.executor = ThreadPoolExecutor(max_workers=threads)

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)


def hosts_role(stats_path: Path) -> None:
    config = HostsConfig(**json.loads(os.environ[CONFIG_ENV]))
    fleet = Fleet(config)
    try:
        asyncio.run(fleet.run())
    finally:
        fleet.jobs_pool.executor.shutdown(wait=True, cancel_futures=True)
        fleet.beat_pool.executor.shutdown(wait=True, cancel_futures=True)
        fleet.claim_pool.executor.shutdown(wait=True, cancel_futures=True)
        stats_path.write_text(json.dumps(asdict(fleet.stats)))


# --- the scheduler (`--role scheduler`) --------------------------------------------------------------------


def scheduler_role(stats_path: Path) -> None:
    """`rankzero scheduler`'s loop plus one recovery sweep, each pass timed: (end, CPU ms, wall ms, waiting,
    placed) per pass, written at the end."""
    from core.settings import get_settings
    from worker import recover, scheduler

    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)  # as `rankzero scheduler` logs
    settings = get_settings()
    passes: list[tuple[float, float, float, int, int]] = []
    real = scheduler.schedule_once

    def timed(s: Any) -> Any:
        cpu, wall = time.thread_time(), time.perf_counter()
        plan = real(s)
        passes.append((time.time(), (time.thread_time() - cpu) * 1000, (time.perf_counter() - wall) * 1000,
                       len(plan.pending) + len(plan.placements), len(plan.placements)))  # fmt: skip
        logging.getLogger("rankzero.sim").info(
            "pass: %.0f ms CPU, %.0f ms wall, %d waiting, %d placed", *passes[-1][1:]
        )
        return plan

    scheduler.schedule_once = timed  # the loop calls it by its module's name
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threads = [scheduler.start_scheduler_thread(settings, stop), recover.start_recovery_thread(settings, stop)]
    try:
        while not stop.wait(1.0):
            pass
    finally:
        stop.set()
        for t in threads:
            t.join(15)
        stats_path.write_text(json.dumps(passes))


# --- this process: the service, the users, the measures ------------------------------------------------------


class Procs:
    """The processes of one phase, each in a session of its own; `stop_all` ends them (SIGTERM, then SIGKILL)."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        with open(self.path(name), "ab") as log:
            proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)  # fmt: skip
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> str:
        return self.path(name).read_text(errors="replace")[-3000:]

    def path(self, name: str) -> Path:
        return self.tmp / f"{name.split()[-1].lower()}.log"

    def check(self) -> None:
        dead = {n: p.returncode for n, p in self.procs.items() if p.poll() is not None}
        if dead:
            name = next(iter(dead))
            raise RuntimeError(f"{name} exited ({dead[name]}):\n{self.log(name)}")

    def stop_all(self, timeout: float = 30.0) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


@dataclass
class Phase:
    """What one phase needs to know of its service."""

    scale: Scale
    url: str
    database: str
    base: str  # the API's URL, /api included
    pool: str
    stale_after_s: float
    procs: Procs


def service_env(tmp: Path, url: str, pool: str, args: argparse.Namespace) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("RANKZERO_")},
        "PYTHONPATH": str(ROOT),
        "PYTHONUNBUFFERED": "1",
        "RANKZERO_DATA_DIR": str(tmp / "data"),
        "RANKZERO_RUNS_DIR": str(tmp / "runs"),
        "RANKZERO_DATABASE_URL": url,
        "RANKZERO_BROKER_URL": f"redis://127.0.0.1:6379/{args.redis_db}",
        "RANKZERO_QUEUE": pool,
        "RANKZERO_API_TOKEN": TOKEN,
        "RANKZERO_GPUS": "",
        "RANKZERO_HEARTBEAT_S": str(args.heartbeat_s),
        "RANKZERO_MAX_ACTIVE_JOBS": "10000000",
        # Every dashboard and CLI user is the admin from 127.0.0.1 here, where a real one has an address (and
        # a user) of its own: the per-client caps would close their connections, which no real user meets.
        "RANKZERO_MAX_STREAMS_PER_CLIENT": str(args.dashboards + 16),
        "RANKZERO_MAX_CONNECTIONS_PER_CLIENT": str(args.dashboards + args.cli_users + 32),
        "RANKZERO_HOST_NAME": "sim-scheduler",
    }


def job_spec(i: int) -> dict[str, Any]:
    """A one-GPU job, as the API stores it (validated, every default written out)."""
    from trainer.spec import JobSpec

    fields = {"name": f"sim-{i}", "model": {"name": "mlp"}, "data": {"name": "digits"}, "nproc": 1, "device": "cuda",
              "max_steps": 1_000_000}  # fmt: skip
    return JobSpec.model_validate(fields).model_dump(mode="json")


def steady_reason(pool: str, names: list[str], gpus: list[int]) -> str:
    """Why a one-GPU job waits on this fleet with every GPU busy, in the scheduler's words (core/placement.py):
    the seeded queue has waited a while, so its reasons are written already. Seeded without one, the first pass
    would write all 10,000, one transaction each (worker/scheduler.py), before anything else: what a burst of
    10,000 submits costs, not the steady state measured here."""
    from core.placement import HostView, NodeUse, Usage, Waiting, plan
    from trainer.spec import JobSpec

    views = [
        HostView(n, pool, tuple(str(g) for g in range(k)), os.cpu_count() or 1, "api")
        for n, k in zip(names, gpus, strict=True)
    ]
    usage = [Usage(10**9 + i, 0, False, (NodeUse(v.name, v.gpus),)) for i, v in enumerate(views)]
    job = Waiting(1, pool, 0, time.time(), JobSpec.model_validate(job_spec(0)))
    return plan([job], views, usage).pending.get(1, "")


def seed_jobs(url: str, pool: str, count: int, reason: str) -> None:
    """`count` queued jobs with their "submitted" timeline rows and `reason`, in one bulk INSERT each (setup, not
    measured)."""
    from datetime import datetime, timedelta, timezone

    from sqlalchemy import insert, select
    from sqlmodel import col

    from core.db import get_engine
    from core.tables import Job, JobTransition

    spec = job_spec(0)
    start = datetime.now(timezone.utc) - timedelta(hours=1)
    rows = [{"name": f"sim-{i}", "spec": spec, "status": "queued", "queue": pool, "priority": 0,
             "created_at": start + timedelta(milliseconds=i), "pending_reason": reason}
            for i in range(count)]  # fmt: skip
    engine = get_engine(url)
    with engine.begin() as conn:
        conn.execute(insert(Job), rows)
        ids = conn.execute(select(col(Job.id), col(Job.created_at))).all()
        conn.execute(insert(JobTransition), [{"job_id": i, "status": "queued", "at": at, "attempt": 0,
                                              "detail": "submitted"} for i, at in ids])  # fmt: skip


def wait_api(base: str, procs: Procs, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                return
        procs.check()
        if time.monotonic() > deadline:
            raise RuntimeError(f"the API did not come up in {timeout:.0f} s:\n{procs.log('API')}")
        time.sleep(0.3)


def counts(url: str) -> tuple[int, int, int, int]:
    """(hosts registered, jobs running, jobs queued, of them placed and not claimed yet) by a direct read."""
    from sqlalchemy import func, select
    from sqlmodel import col

    from core.db import get_engine
    from core.tables import Host, Job

    with get_engine(url).connect() as conn:
        hosts = conn.execute(select(func.count()).select_from(Host)).scalar_one()
        by = {str(getattr(status, "value", status)): int(n) for status, n in
              conn.execute(select(col(Job.status), func.count()).group_by(col(Job.status))).all()}  # fmt: skip
        placed = conn.execute(
            select(func.count()).where(col(Job.status) == "queued", col(Job.placement_id).isnot(None))
        ).scalar_one()
    return int(hosts), by.get("running", 0), by.get("queued", 0), int(placed)


def registered(phase: Phase, timeout: float) -> None:
    """Wait until every simulated host has registered (or `timeout`)."""
    deadline = time.monotonic() + timeout
    while counts(phase.url)[0] < phase.scale.hosts and time.monotonic() < deadline:
        phase.procs.check()
        time.sleep(1)


def ramp(phase: Phase, ramp_s: float) -> float:
    """Wait until nearly every GPU runs a job (or `ramp_s`); the fraction of the target running."""
    deadline = time.monotonic() + ramp_s
    target = phase.scale.running
    running = 0
    while time.monotonic() < deadline:
        phase.procs.check()
        hosts, running, queued, placed = counts(phase.url)
        print(f"  ramp: {hosts} hosts, {running} running, {queued} queued ({placed} placed, not claimed yet)",
              file=sys.stderr)  # fmt: skip
        if running >= 0.97 * target:
            break
        time.sleep(3)
    return running / target


@dataclass
class Users:
    """What the simulated users saw: latencies per route, the dashboards' freshness, errors."""

    latency: dict[str, list[float]] = field(default_factory=dict)  # route -> ms
    statuses: Counter[str] = field(default_factory=Counter)  # "route status"
    fresh: list[float] = field(default_factory=list)  # s from a point's making to its arrival on a stream
    running_ids: list[int] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    def record(self, route: str, ms: float, status: int) -> None:
        self.latency.setdefault(route, []).append(ms)
        if status != 200 and not (route == "POST /jobs" and status == 201):
            self.statuses[f"{route} {status}"] += 1

    async def nap(self, seconds: float) -> bool:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.stop.wait(), max(0.0, seconds))
        return self.stop.is_set()

    def some_job(self, rng: random.Random) -> int:
        return rng.choice(self.running_ids) if self.running_ids else 1


async def timed_get(client: httpx.AsyncClient, users: Users, route: str, url: str) -> None:
    t0 = time.perf_counter()
    try:
        r = await client.get(url)
        users.record(route, (time.perf_counter() - t0) * 1000, r.status_code)
    except httpx.HTTPError as exc:
        users.statuses[f"{route} {type(exc).__name__}"] += 1


async def cli_user(client: httpx.AsyncClient, users: Users, think_s: float, seed: int) -> None:
    """`rankzero jobs`, `rankzero show ID`, now and then `rankzero hosts`, a think time between each."""
    rng = random.Random(seed)
    if await users.nap(rng.uniform(0, think_s)):
        return
    for i in range(10**9):
        await timed_get(client, users, "GET /jobs", "/jobs")
        if await users.nap(think_s):
            return
        await timed_get(client, users, "GET /jobs/{id}", f"/jobs/{users.some_job(rng)}")
        if i % 5 == 4:
            await timed_get(client, users, "GET /hosts", "/hosts")
        if await users.nap(think_s):
            return


async def dashboard(client: httpx.AsyncClient, users: Users, seed: int) -> None:
    """A job page's live stream: opened on a running job, read until the job ends, then another."""
    rng = random.Random(seed)
    while not users.stop.is_set():
        t0 = time.perf_counter()
        try:
            async with client.stream("GET", f"/jobs/{users.some_job(rng)}/stream") as r:
                users.record("GET /jobs/{id}/stream (open)", (time.perf_counter() - t0) * 1000, r.status_code)
                if r.status_code == 200:
                    await read_stream(r, users)
        except httpx.HTTPError as exc:
            users.statuses[f"stream {type(exc).__name__}"] += 1
        if await users.nap(1.0):
            return


async def read_stream(r: httpx.Response, users: Users) -> None:
    event = ""
    async for line in r.aiter_lines():
        if line.startswith("event:"):
            event = line[6:].strip()
            if event == "end":
                return
        elif line.startswith("data:") and event == "metrics":
            now = time.time()
            users.fresh += [now - p["value"] for p in json.loads(line[5:]) if p.get("name") == SENT_AT]


async def submitter(client: httpx.AsyncClient, users: Users, per_s: float) -> None:
    """New jobs at the rate jobs finish (running / mean run time), so the queue stays as deep."""
    spec = job_spec(0)
    gap = 1.0 / per_s if per_s > 0 else math.inf
    while not await users.nap(gap):
        t0 = time.perf_counter()
        try:
            r = await client.post("/jobs", json=spec)
            users.record("POST /jobs", (time.perf_counter() - t0) * 1000, r.status_code)
        except httpx.HTTPError as exc:
            users.statuses[f"POST /jobs {type(exc).__name__}"] += 1


@dataclass
class Watch:
    """What this process watches during the window, every few seconds: hosts read as not alive, the oldest
    heartbeat, the running jobs (for the users), PostgreSQL's processes."""

    not_alive: set[str] = field(default_factory=set)
    oldest_beat_s: float = 0.0
    running: list[int] = field(default_factory=list)
    queued: list[int] = field(default_factory=list)
    backends: CpuWatch = field(default_factory=CpuWatch)
    server: CpuWatch = field(default_factory=CpuWatch)


def look(phase: Phase, watch: Watch, admin: Any, master: int | None) -> list[int]:
    """One look (in a thread): hosts as the scheduler reads them (core.hosts.read_all), jobs, PostgreSQL CPU;
    returns the running job ids."""
    from sqlalchemy import select
    from sqlmodel import col

    from core import hosts
    from core.db import db_now, get_engine
    from core.tables import Job

    engine = get_engine(phase.url)
    rows = hosts.read_all(engine, phase.stale_after_s)
    now = db_now(engine)
    watch.not_alive |= {h.name for h in rows if not h.alive}  # silent, or flagged as given up: no placement
    if rows:
        watch.oldest_beat_s = max(watch.oldest_beat_s, max((now - h.heartbeat_at).total_seconds() for h in rows))
    with engine.connect() as conn:
        ids = [i for i in conn.execute(select(col(Job.id)).where(col(Job.status) == "running")).scalars() if i]
    _, running, queued, _ = counts(phase.url)
    watch.running.append(running)
    watch.queued.append(queued)
    look_at_postgres(watch, admin, phase.database, master)
    return ids


def look_at_postgres(watch: Watch, admin: Any, database: str, master: int | None) -> None:
    backends = pg_backends(admin, database)
    watch.backends.look(backends)
    watch.server.look(sorted({*backends, *([master, *children_of(master)] if master is not None else [])}))


async def watcher(phase: Phase, users: Users, watch: Watch, admin: Any) -> None:
    master = postmaster(admin)
    while True:
        users.running_ids = await asyncio.to_thread(look, phase, watch, admin, master)
        if await users.nap(3.0):
            return


async def drive(phase: Phase, args: argparse.Namespace, watch: Watch, admin: Any) -> Users:
    """The users and the watcher, for the window; every task stopped at its end."""
    users = Users()
    n = phase.scale.dashboards + phase.scale.cli_users + 8
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    timeout = httpx.Timeout(30.0, read=40.0)  # a stream pings every 15 s
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(base_url=phase.base, headers=headers, limits=limits, timeout=timeout) as client:
        users.running_ids = await asyncio.to_thread(look, phase, watch, admin, postmaster(admin))
        tasks = [asyncio.ensure_future(watcher(phase, users, watch, admin))]
        tasks += [asyncio.ensure_future(dashboard(client, users, i)) for i in range(phase.scale.dashboards)]
        tasks += [asyncio.ensure_future(cli_user(client, users, args.cli_think_s, 1000 + i))
                  for i in range(phase.scale.cli_users)]  # fmt: skip
        tasks.append(asyncio.ensure_future(submitter(client, users, phase.scale.running / phase.scale.job_s)))
        await users.nap(phase.scale.window_s)
        users.stop.set()
        _, pending = await asyncio.wait(tasks, timeout=10)
        for task in pending:  # a stream blocked on its next line
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return users


def db_size(admin: Any, database: str) -> int:
    return int(admin.execute("SELECT pg_database_size(%s)", (database,)).fetchone()[0])


def measure(phase: Phase, args: argparse.Namespace) -> dict[str, Any]:
    """The window: CPU and size before and after, the users and the watcher meanwhile."""
    import psycopg

    procs = {name: p.pid for name, p in phase.procs.procs.items()}
    with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
        watch = Watch()
        size0, busy0 = db_size(admin, phase.database), machine_busy()
        cpu0 = {name: proc_ticks(pid) or 0 for name, pid in procs.items()}
        self0, t0 = time.process_time(), time.time()
        users = asyncio.run(drive(phase, args, watch, admin))
        t1 = time.time()
        look_at_postgres(watch, admin, phase.database, postmaster(admin))
        cpu1 = {name: proc_ticks(pid) or 0 for name, pid in procs.items()}
        size1, busy1, self1 = db_size(admin, phase.database), machine_busy(), time.process_time()
    seconds = t1 - t0
    cores = {name: (cpu1[name] - cpu0[name]) / TICK / seconds for name in procs}
    cores["this process (users, watcher)"] = (self1 - self0) / seconds
    machine = (busy1[0] - busy0[0]) / max(1, busy1[1] - busy0[1]) * (os.cpu_count() or 1)
    return {"t0": t0, "t1": t1, "seconds": seconds, "users": users, "watch": watch, "cores": cores,
            "pg_backends": watch.backends.cores(seconds), "pg_server": watch.server.cores(seconds),
            "growth_per_h": (size1 - size0) * 3600 / seconds, "size": size1, "machine": machine}  # fmt: skip


def run_phase(scale: Scale, args: argparse.Namespace, title: str) -> dict[str, Any]:
    """One phase: a fresh database, the service, the fleet; ramp, measure, stop; its measures."""
    print(f"\n{title}: {scale.label()}, {scale.dashboards} dashboards, {scale.cli_users} CLI users", file=sys.stderr)
    pool = f"sim{secrets.token_hex(3)}"
    with tempfile.TemporaryDirectory(prefix="rz-cluster-sim-") as t, pg_database() as (url, database):
        tmp = Path(t)
        env = service_env(tmp, url, pool, args)
        procs = Procs(tmp)
        from core.settings import Settings

        settings = Settings.model_validate({"heartbeat_s": args.heartbeat_s})  # the stale threshold it implies
        port = free_port()
        phase = Phase(scale, url, database, f"http://127.0.0.1:{port}/api", pool, settings.resolved_stale_after_s,
                      procs)  # fmt: skip
        try:
            result = start_and_measure(phase, args, env, tmp)
        finally:
            procs.stop_all()
            clean_redis(args.redis_db, pool)
            if args.keep_logs:
                keep = Path(tempfile.mkdtemp(prefix="rz-cluster-sim-logs-"))
                for log in tmp.glob("*.log"):
                    (keep / log.name).write_bytes(log.read_bytes())
                print(f"  logs kept in {keep}", file=sys.stderr)
        result.update(collect(tmp, result, args))
    return result


def start_and_measure(phase: Phase, args: argparse.Namespace, env: dict[str, str], tmp: Path) -> dict[str, Any]:
    procs, scale = phase.procs, phase.scale
    port = phase.base.rsplit(":", 1)[1].split("/")[0]
    procs.start("API", [PY, "-m", "cli.main", "api", "--port", port], env)
    wait_api(phase.base, procs)  # the API migrates the new database
    names = [f"h{i:04d}" for i in range(scale.hosts)]
    gpus = gpu_counts(scale.hosts, scale.running)
    seed_jobs(phase.url, phase.pool, scale.running + scale.queued, steady_reason(phase.pool, names, gpus))
    k = max(1, min(args.sim_procs, scale.hosts))
    for i in range(k):
        config = HostsConfig(names[i::k], gpus[i::k], scale.points_per_s, scale.series, scale.job_s, args.db_threads,
                             args.seed + i)  # fmt: skip
        procs.start(f"simulator hosts{i}", [PY, __file__, "--role", "hosts", "--stats", str(tmp / f"hosts{i}.json")],
                    {**env, CONFIG_ENV: json.dumps(asdict(config))})  # fmt: skip
    registered(phase, args.ramp_s)  # a pass over half the fleet would say (and write) other reasons
    procs.start("scheduler", [PY, __file__, "--role", "scheduler", "--stats", str(tmp / "scheduler.json")], env)
    reached = ramp(phase, args.ramp_s)
    print(f"  measuring for {scale.window_s:.0f} s", file=sys.stderr)
    result = measure(phase, args)
    procs.check()
    result.update(reached=reached, scale=scale, stale_after_s=phase.stale_after_s,
                  host_losses=count_host_losses(phase.url, result["t0"]))  # fmt: skip
    return result


def collect(tmp: Path, result: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The hosts' and the scheduler's own counts, cut to the window."""
    t0, t1 = result["t0"], result["t1"]
    stats = [HostsStats(**json.loads(p.read_text())) for p in sorted(tmp.glob("hosts*.json"))]

    def offered(run: Sequence[float]) -> float:
        return max(0.0, min(run[1], t1) - max(run[0], t0))

    def total(name: str) -> float:
        return sum(n for s in stats for sec, n in getattr(s, name).items() if t0 <= int(sec) < t1)

    passes_file = tmp / "scheduler.json"
    passes = json.loads(passes_file.read_text()) if passes_file.exists() else []
    passes = [p for p in passes if t0 <= p[0] <= t1]
    lags = [lag for s in stats for at, lag in s.lags if t0 <= at <= t1]
    errors: Counter[str] = Counter()
    for s in stats:
        errors.update(s.errors)
    seconds = int(t1) - int(t0)
    return {
        "offered_s": sum(offered(run) for s in stats for run in s.runs) * args.points_per_s / (t1 - t0),
        "looks": [gap for s in stats for at, gap in s.looks if t0 <= at <= t1],
        "written_s": total("written") / seconds,
        "sys_s": total("sys_written") / seconds, "claims_s": total("claims") / seconds,
        "finishes_s": total("finishes") / seconds, "lags": lags, "passes": passes, "sim_errors": errors,
    }  # fmt: skip


def count_host_losses(url: str, t0: float) -> int:
    """Jobs the recovery sweep (or a node 0) took back for a silent host since `t0`."""
    from datetime import datetime, timezone

    from sqlalchemy import func, select
    from sqlmodel import col

    from core.db import get_engine
    from core.tables import JobTransition

    since = datetime.fromtimestamp(t0, timezone.utc)
    lost = col(JobTransition.detail).contains("worker lost") | col(JobTransition.detail).contains("went silent")
    with get_engine(url).connect() as conn:
        return int(conn.execute(select(func.count()).where(lost, col(JobTransition.at) >= since)).scalar_one())


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- the table -------------------------------------------------------------------------------------------------


def fmt(x: float, digits: int = 0) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:,.{digits}f}"


def rows_of(r: dict[str, Any]) -> dict[str, tuple[float, int, str]]:
    """measure → (value, digits, unit), for one phase."""
    users: Users = r["users"]
    watch: Watch = r["watch"]
    out: dict[str, tuple[float, int, str]] = {
        "jobs running (mean over the window)": (statistics.fmean(watch.running or [0]), 0, ""),
        "jobs queued (mean over the window)": (statistics.fmean(watch.queued or [0]), 0, ""),
    }
    for route in ("GET /jobs", "GET /jobs/{id}", "GET /hosts", "POST /jobs", "GET /jobs/{id}/stream (open)"):
        xs = users.latency.get(route, [])
        out[f"API {route}: p50 / p99 ms (requests)"] = (
            percentile(xs, 50),
            0,
            f"/ {fmt(percentile(xs, 99))} ({len(xs)})",
        )
    out["dashboard freshness: point made → on the stream, p50 / p99 s"] = (
        percentile(users.fresh, 50), 1, f"/ {fmt(percentile(users.fresh, 99), 1)}")  # fmt: skip
    out["API errors (non-2xx, transport)"] = (float(sum(users.statuses.values())), 0, "")
    cpu = [p[1] for p in r["passes"]]
    waiting = statistics.fmean([p[3] for p in r["passes"]]) if r["passes"] else math.nan
    out["scheduler pass CPU: p50 / p99 ms (jobs waiting, mean)"] = (
        percentile(cpu, 50), 0, f"/ {fmt(percentile(cpu, 99))} ({fmt(waiting)})")  # fmt: skip
    wall = [p[2] for p in r["passes"]]
    out["scheduler pass wall time: p50 / p99 ms"] = (percentile(wall, 50), 0, f"/ {fmt(percentile(wall, 99))}")
    out["scheduler passes / s"] = (len(cpu) / r["seconds"], 1, "")
    lags = r["lags"]
    out["heartbeat lag: p50 / p99 / max s"] = (
        percentile(lags, 50), 2, f"/ {fmt(percentile(lags, 99), 2)} / {fmt(max(lags or [math.nan]), 2)}")  # fmt: skip
    out["oldest heartbeat seen / stale threshold s"] = (watch.oldest_beat_s, 1, f"/ {fmt(r['stale_after_s'])}")
    out["false host losses (hosts read not alive) / jobs requeued as host lost"] = (
        float(len(watch.not_alive)), 0, f"/ {r['host_losses']}")  # fmt: skip
    offered, written = r["offered_s"], r["written_s"]
    ratio = 100 * written / offered if offered else math.nan
    out["metric points / s: offered → written (% written)"] = (offered, 0, f"→ {fmt(written)} ({fmt(ratio)} %)")
    out["a job's look (row read + ingest): interval p50 / p99 s (real: 1)"] = (
        percentile(r["looks"], 50), 1, f"/ {fmt(percentile(r['looks'], 99), 1)}")  # fmt: skip
    out["sys/… sample points written / s"] = (r["sys_s"], 0, "")
    out["claims / finishes per s"] = (r["claims_s"], 1, f"/ {fmt(r['finishes_s'], 1)}")
    out["PostgreSQL CPU, this database's backends (cores)"] = (r["pg_backends"], 2, "")
    out["PostgreSQL CPU, whole server, other databases too (cores)"] = (r["pg_server"], 2, "")
    out["database growth, MB / h (size at the end MB)"] = (r["growth_per_h"] / 1e6, 0, f"({fmt(r['size'] / 1e6)})")
    per_k = r["pg_backends"] / (r["written_s"] / 1000) if r["written_s"] else math.nan
    out["PostgreSQL backends' CPU per 1,000 points/s written (cores)"] = (per_k, 2, "")
    for name, c in r["cores"].items():
        out[f"CPU (cores): {name}"] = (c, 2, "")
    other = r["machine"] - sum(r["cores"].values()) - r["pg_server"]
    out["CPU (cores): everything else on the machine (other work)"] = (max(0.0, other), 2, "")
    out["CPU (cores): the whole machine, every process"] = (r["machine"], 2, f"of {os.cpu_count()}")
    return out


def print_table(phases: list[tuple[str, dict[str, Any]]]) -> None:
    tables = [(title, rows_of(r)) for title, r in phases]
    heads = " | ".join(f"{t} ({r['scale'].label()})" for t, r in phases)
    print(f"\n| measure | {heads} |" + (" ÷ baseline |" if len(phases) == 2 else ""))
    print("|---" * (len(phases) + 1 + (len(phases) == 2)) + "|")
    for key in tables[-1][1]:
        cells = []
        for _, rows in tables:
            value, digits, unit = rows.get(key, (math.nan, 0, ""))
            cells.append(f"{fmt(value, digits)} {unit}".strip())
        ratio = ""
        if len(tables) == 2 and key in tables[0][1]:
            a, b = tables[0][1][key][0], tables[1][1][key][0]
            ratio = f" {fmt(b / a, 1)} |" if a and not math.isnan(a) and not math.isnan(b) else " – |"
        print(f"| {key} | {' | '.join(cells)} |{ratio}")


def limits(title: str, r: dict[str, Any]) -> list[str]:
    """Plain words: which process is the limit, and what was not sustained."""
    notes = []
    for name, c in sorted(r["cores"].items(), key=lambda kv: -kv[1]):
        if c >= SATURATED:
            notes.append(f"{title}: {name} used {c:.0%} of a core: saturated (one Python process runs on one core)")
    if r["pg_backends"] >= SATURATED:
        notes.append(f"{title}: PostgreSQL's backends of this database used {r['pg_backends']:.2f} cores")
    cpus = os.cpu_count() or 1
    if r["machine"] >= SATURATED * cpus:
        notes.append(f"{title}: the machine was {r['machine'] / cpus:.0%} busy ({r['machine']:.2f} of {cpus} cores): "
                     "every process waited for a CPU, so latencies include that wait")  # fmt: skip
    if r["offered_s"] and r["written_s"] < 0.95 * r["offered_s"]:
        notes.append(f"{title}: ingest NOT sustained: {r['written_s']:,.0f} of {r['offered_s']:,.0f} points/s written "
                     f"({r['written_s'] / r['offered_s']:.0%}); the rest is a growing backlog")  # fmt: skip
        notes.append(needed(title, r))
    if percentile(r["looks"], 99) > r["stale_after_s"]:
        notes.append(f"{title}: the simulator's looks at a job were up to {percentile(r['looks'], 99):.0f} s apart "
                     f"(real: 1 s), past the stale threshold ({r['stale_after_s']:.0f} s): jobs requeued as host lost "
                     "are the starved simulator's, not the service's")  # fmt: skip
    if r["reached"] < 0.97:
        notes.append(f"{title}: only {r['reached']:.0%} of the {r['scale'].running:,} jobs were running when the "
                     "window began (the ramp's deadline)")  # fmt: skip
    if r["users"].statuses:
        notes.append(f"{title}: API errors: {dict(r['users'].statuses.most_common(6))}")
    if r["sim_errors"]:
        notes.append(f"{title}: simulator errors: {dict(r['sim_errors'].most_common(6))}")
    return notes


def needed(title: str, r: dict[str, Any]) -> str:
    """What the target load would take at the CPU each written point cost here (linear: a floor, not a promise)."""
    scale: Scale = r["scale"]
    target = scale.running * scale.points_per_s
    k = target / max(1.0, r["written_s"])
    sim = sum(c for name, c in r["cores"].items() if name.startswith("simulator"))
    return (f"{title}: at this run's cost per written point, the target "
            f"({scale.running:,} jobs, {target:,.0f} points/s) "
            f"needs about {r['pg_backends'] * k:.1f} cores of PostgreSQL backends and {sim * k:.1f} cores of the "
            "hosts' supervisors (spread over the real hosts, one job's share each)")  # fmt: skip


def machine_words() -> str:
    load = os.getloadavg()[0]
    return f"{os.cpu_count()} CPUs, load average {load:.1f} at the start, this process at nice {os.nice(0)}"


# --- main ------------------------------------------------------------------------------------------------------


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--small", action="store_true", help="20 hosts, 50 running, 200 queued, 5 dashboards, 3 CLI "
                   "users, 30 s; no baseline phase")  # fmt: skip
    p.add_argument("--hosts", type=int, default=500)
    p.add_argument("--running", type=int, default=2000, help="jobs running (the hosts' GPUs add up to this)")
    p.add_argument("--queued", type=int, default=10_000)
    p.add_argument("--points-per-s", type=float, default=10.0, help="metric points a second of each running job")
    p.add_argument("--series", type=int, default=5, help="metric names per step (≥ 2)")
    p.add_argument("--dashboards", type=int, default=50, help="live job pages (SSE streams)")
    p.add_argument("--cli-users", type=int, default=20)
    p.add_argument("--cli-think-s", type=float, default=2.0, help="a CLI user's pause between requests")
    p.add_argument("--window-s", type=float, default=60.0)
    p.add_argument("--ramp-s", type=float, default=90.0, help="longest wait for the jobs to run before the window")
    p.add_argument("--job-s", type=float, default=300.0, help="mean run time of a job")
    p.add_argument("--heartbeat-s", type=float, default=5.0, help="RANKZERO_HEARTBEAT_S (the default is 5)")
    p.add_argument("--baseline-fraction", type=float, default=0.1, help="the baseline phase's scale (0: none)")
    p.add_argument("--baseline-window-s", type=float, default=30.0)
    p.add_argument("--sim-procs", type=int, default=2, help="processes playing the hosts")
    p.add_argument("--db-threads", type=int, default=8, help="each hosts process's threads for job database work")
    p.add_argument("--redis-db", type=int, default=13)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--keep-logs", action="store_true", help="keep each process's log in a folder under /tmp")
    p.add_argument("--role", choices=["hosts", "scheduler"], help=argparse.SUPPRESS)
    p.add_argument("--stats", type=Path, help=argparse.SUPPRESS)
    if "--small" in argv:  # the preset's values, under any given explicitly
        p.set_defaults(hosts=20, running=50, queued=200, dashboards=5, cli_users=3, window_s=30.0,
                       baseline_fraction=0.0, ramp_s=60.0)  # fmt: skip
    args = p.parse_args(argv)
    if args.series < 2 or args.running < args.hosts:
        p.error("--series must be ≥ 2 and --running ≥ --hosts (every host has a GPU)")
    return args


def main(argv: list[str]) -> None:
    args = parse(argv)
    if args.role == "hosts":
        hosts_role(args.stats)
        return
    if args.role == "scheduler":
        scheduler_role(args.stats)
        return
    # A SIGTERM (a `timeout`, a CI's cancel) unwinds through the phases' `finally`: their processes, database
    # and Redis keys go too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    full = Scale(args.hosts, args.running, args.queued, args.points_per_s, args.series, args.dashboards,
                 args.cli_users, args.window_s, args.job_s)  # fmt: skip
    phases: list[tuple[str, dict[str, Any]]] = []
    started = machine_words()
    if args.baseline_fraction > 0:
        phases.append(("baseline", run_phase(full.part(args.baseline_fraction, args.baseline_window_s), args,
                                                "baseline")))  # fmt: skip
    phases.append(("full" if not args.small else "small", run_phase(full, args, "full scale")))
    print(f"\nThis machine: {started}. Each phase: its own database and processes; CPU in cores (1.00: one core busy).")
    print_table(phases)
    notes = [n for title, r in phases for n in limits(title, r)]
    print("\nLimits: " + ("none seen" if not notes else "\n- " + "\n- ".join(notes)))


if __name__ == "__main__":
    main(sys.argv[1:])
