"""A snapshot of the service (api/observability/snapshot.py) as Prometheus metric families: pure.

Label sets are bounded: statuses and states are fixed lists; pools and hosts are what the service
runs on; jobs are only the running ones (at most snapshot.MAX_JOB_SERIES).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from api.observability.snapshot import QUEUE_WAIT_BUCKETS, Snapshot
from core.tables import JobStatus

DELIVERY_STATES = ("pending", "delivered", "failed")


def cumulative_buckets(le_counts: tuple[int, ...], total: int, bounds: tuple[float, ...]) -> list[tuple[str, float]]:
    """Prometheus histogram buckets (`le` → how many values are ≤ it) from per-bound counts, +Inf last."""
    return [*((repr(b), float(n)) for b, n in zip(bounds, le_counts, strict=True)), ("+Inf", float(total))]


def _jobs(snap: Snapshot) -> Iterator[Metric]:
    pools = sorted({pool for _, pool in snap.jobs} | {h.pool for h in snap.hosts})
    jobs = GaugeMetricFamily("rankzero_jobs", "Jobs by status and pool.", labels=["status", "pool"])
    for pool in pools:
        for status in JobStatus:
            jobs.add_metric([status.value, pool], float(snap.jobs.get((status.value, pool), 0)))
    yield jobs
    depth = GaugeMetricFamily("rankzero_queue_depth", "Queued jobs (waiting for a place) by pool.", labels=["pool"])
    oldest = GaugeMetricFamily(
        "rankzero_queue_oldest_seconds", "Age of the oldest queued job by pool (0: none queued).", labels=["pool"]
    )
    for pool in pools:
        depth.add_metric([pool], float(snap.jobs.get((JobStatus.queued.value, pool), 0)))
        oldest.add_metric([pool], snap.queued_ages_s.get(pool, 0.0))
    yield depth
    yield oldest
    wait = HistogramMetricFamily(
        "rankzero_queue_wait_seconds", "Seconds from submit to first start, over every job that started."
    )
    buckets = cumulative_buckets(snap.queue_wait_le, snap.queue_wait_count, QUEUE_WAIT_BUCKETS)
    wait.add_metric([], buckets, snap.queue_wait_sum_s)
    yield wait


def _hosts(snap: Snapshot) -> Iterator[Metric]:
    counts = GaugeMetricFamily(
        "rankzero_hosts", "Hosts by pool and state (alive, draining, dead).", labels=["pool", "state"]
    )
    by: dict[tuple[str, str], int] = {}
    for h in snap.hosts:
        state = "dead" if not h.alive else "draining" if h.draining else "alive"
        by[(h.pool, state)] = by.get((h.pool, state), 0) + 1
    for pool in sorted({h.pool for h in snap.hosts}):
        for state in ("alive", "draining", "dead"):
            counts.add_metric([pool, state], float(by.get((pool, state), 0)))
    yield counts
    up = GaugeMetricFamily("rankzero_host_up", "1 while the host's workers heartbeat.", labels=["host", "pool"])
    draining = GaugeMetricFamily("rankzero_host_draining", "1 while the host takes no new work.", labels=["host"])
    gpus = GaugeMetricFamily(
        "rankzero_host_gpus", "GPUs per host by state (used, free, faulty).", labels=["host", "state"]
    )
    slots = GaugeMetricFamily(
        "rankzero_host_cpu_slots", "CPU rank slots per host (used, free).", labels=["host", "state"]
    )
    for h in snap.hosts:
        faults = h.gpu_faults
        used = [g for g in h.gpus if g not in h.free_gpus and g not in faults]
        up.add_metric([h.name, h.pool], 1.0 if h.alive else 0.0)
        draining.add_metric([h.name], 1.0 if h.draining else 0.0)
        gpus.add_metric([h.name, "used"], float(len(used)))
        gpus.add_metric([h.name, "free"], float(len(h.free_gpus)))
        gpus.add_metric([h.name, "faulty"], float(len(faults)))
        slots.add_metric([h.name, "used"], float(h.cpu_slots - h.free_slots))
        slots.add_metric([h.name, "free"], float(h.free_slots))
    yield from (up, draining, gpus, slots)


def _running(snap: Snapshot) -> Iterator[Metric]:
    labels = ["job", "name", "pool"]
    step = GaugeMetricFamily("rankzero_job_step", "Latest step of a running job.", labels=labels)
    progress = GaugeMetricFamily("rankzero_job_progress_ratio", "step / total_steps of a running job.", labels=labels)
    speed = GaugeMetricFamily("rankzero_job_samples_per_second", "Training throughput of a running job.", labels=labels)
    loss = GaugeMetricFamily("rankzero_job_loss", "Latest training loss of a running job.", labels=labels)
    for j in snap.running:
        key = [str(j.id), j.name, j.pool]
        step.add_metric(key, float(j.step))
        if j.total_steps:
            progress.add_metric(key, j.step / j.total_steps)
        if j.samples_per_s is not None:
            speed.add_metric(key, j.samples_per_s)
        if j.latest_loss is not None:
            loss.add_metric(key, j.latest_loss)
    yield from (step, progress, speed, loss)


def _service(snap: Snapshot) -> Iterator[Metric]:
    points = CounterMetricFamily("rankzero_metric_points_ingested", "Metric points written since the service began.")
    points.add_metric([], float(snap.points_ingested))
    yield points
    deliveries = GaugeMetricFamily(
        "rankzero_notification_deliveries", "Webhook deliveries by state (failed: given up).", labels=["state"]
    )
    for state in DELIVERY_STATES:
        deliveries.add_metric([state], float(snap.deliveries.get(state, 0)))
    yield deliveries
    if snap.scheduler_lease_age_s is not None:
        lease = GaugeMetricFamily(
            "rankzero_scheduler_lease_age_seconds",
            "Since the active scheduler last renewed its lease (it renews every pass; large: no scheduler).",
        )
        lease.add_metric([], snap.scheduler_lease_age_s)
        yield lease


def _job_seconds(snap: Snapshot) -> Iterator[Metric]:
    seconds = CounterMetricFamily(
        "rankzero_job_seconds",
        "Finished jobs' wall time by user, pool and where it went (queued, starting, training, checkpointing, "
        "lost_to_restarts, stopped; docs/know-why.md).",
        labels=["user", "pool", "part"],
    )
    for (user, pool, part), value in sorted(snap.job_seconds.items()):
        seconds.add_metric([user, pool, part], value)
    yield seconds


def families(snap: Snapshot) -> list[Metric]:
    """Every metric family of one scrape."""
    return [*_jobs(snap), *_hosts(snap), *_running(snap), *_service(snap), *_job_seconds(snap)]


class DatabaseCollector(Collector):
    """Reads a snapshot at each scrape; a database that cannot be read gives `rankzero_database_up 0`."""

    def __init__(self, read: Callable[[], Snapshot]) -> None:
        self.read = read

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("rankzero_database_up", "1 when this scrape could read the database.")
        try:
            snap = self.read()
        except Exception:  # a scrape during a database restart: say so instead of failing the scrape
            up.add_metric([], 0.0)
            yield up
            return
        up.add_metric([], 1.0)
        yield up
        yield from families(snap)
