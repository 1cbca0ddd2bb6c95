"""GET /metrics: the exposition parses with prometheus_client's parser and its numbers are the REST API's;
the token guards it on the API port, not on RANKZERO_METRICS_ADDRESS; the pure parts, table-driven."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlmodel import Session

from api.observability.collector import cumulative_buckets, families
from api.observability.request_timing import route_label, status_class
from api.observability.snapshot import RunningJob, Snapshot
from core.tables import Host, JobStatus, SchedulerLease, utcnow
from tests.support import deadlines
from tests.support.ports import free_port

S = JobStatus
DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "rankzero.json"


def scrape(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition, keyed by (name, sorted labels)."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: dict, metric: str, **labels: str) -> float:
    return samples[(metric, tuple(sorted(labels.items())))]


def add_host(db: Session, name: str, gpus: list[str], *, pool: str = "rankzero", age_s: float = 0, **kw: Any) -> None:
    db.add(
        Host(
            name=name, address="10.0.0.1", pool=pool, gpus=gpus, cpu_slots=8, storage_id="s",
            heartbeat_at=utcnow() - timedelta(seconds=age_s), **kw,
        )
    )  # fmt: skip
    db.commit()


def placed(host: str, gpus: list[str], slots: int = 0) -> dict[str, Any]:
    return {
        "nodes": [{"host": host, "node_rank": 0, "gpus": gpus, "slots": slots}],
        "nproc": 1,
        "accumulation_steps": 1,
    }


def test_metrics_match_the_rest_api(client: TestClient, db: Session, make_job) -> None:
    add_host(db, "gpu-a", ["0", "1", "2"])
    add_host(db, "gpu-b", ["0"], drain_requested=True)
    add_host(db, "old", [], age_s=3600)
    for _ in range(3):
        make_job("waiting", S.queued, queue="rankzero")
    make_job("other-pool", S.queued, queue="pool-b")
    run = make_job("training", S.running, placement=placed("gpu-a", ["0", "1"]), step=40, total_steps=100,
                   latest_loss=0.25, samples_per_s=1234.5, started_at=utcnow(), queue="rankzero")  # fmt: skip
    now = utcnow()
    make_job("done", S.succeeded, queue="rankzero", created_at=now - timedelta(seconds=100), started_at=now)
    make_job("broke", S.failed, queue="rankzero")

    assert client.get("/metrics", headers={"Authorization": ""}).status_code == 401
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    m = scrape(r.text)

    assert value(m, "rankzero_database_up") == 1
    for status in S:
        total = client.get("/api/jobs", params={"status": status.value, "limit": 1}).json()["total"]
        counted = sum(
            v for (name, labels), v in m.items() if name == "rankzero_jobs" and ("status", status.value) in labels
        )
        assert counted == total, status
    assert value(m, "rankzero_queue_depth", pool="rankzero") == 3
    assert value(m, "rankzero_queue_depth", pool="pool-b") == 1

    # Two jobs started: one at once (≤ 1 s), one after 100 s (≤ 300 s, > 60 s).
    assert value(m, "rankzero_queue_wait_seconds_count") == 2
    assert [value(m, "rankzero_queue_wait_seconds_bucket", le=le) for le in ("1.0", "60.0", "300.0", "+Inf")] == [
        1,
        1,
        2,
        2,
    ]
    assert value(m, "rankzero_queue_wait_seconds_sum") == pytest.approx(100, abs=1)

    for host in client.get("/api/hosts").json():
        name = host["name"]
        assert value(m, "rankzero_host_up", host=name, pool=host["pool"]) == (1 if host["alive"] else 0)
        assert value(m, "rankzero_host_draining", host=name) == (1 if host["draining"] else 0)
        assert value(m, "rankzero_host_gpus", host=name, state="free") == len(host["free_gpus"])
        assert value(m, "rankzero_host_cpu_slots", host=name, state="free") == host["free_slots"]
    assert value(m, "rankzero_host_gpus", host="gpu-a", state="used") == 2
    assert value(m, "rankzero_hosts", pool="rankzero", state="draining") == 1
    assert value(m, "rankzero_hosts", pool="rankzero", state="dead") == 1

    job = client.get(f"/api/jobs/{run.id}").json()
    key = {"job": str(run.id), "name": "training", "pool": "rankzero"}
    assert value(m, "rankzero_job_loss", **key) == job["latest_loss"]
    assert value(m, "rankzero_job_samples_per_second", **key) == job["samples_per_s"]
    assert value(m, "rankzero_job_step", **key) == job["step"]
    assert value(m, "rankzero_job_progress_ratio", **key) == pytest.approx(0.4)

    # The requests above were timed under their route templates, never their raw paths.
    m = scrape(client.get("/metrics").text)
    routes = {dict(labels).get("route") for (name, labels), _ in m.items() if name.startswith("rankzero_http_request")}
    assert "/api/jobs/{job_id}" in routes and "/api/jobs" in routes and f"/api/jobs/{run.id}" not in routes
    assert value(m, "rankzero_http_request_duration_seconds_count", route="/metrics", method="GET", status="4xx") == 1
    assert value(m, "rankzero_http_request_duration_seconds_count", route="/metrics", method="GET", status="2xx") == 1


def test_scrape_listener_needs_no_token_and_the_api_port_still_does(live_api, api_settings) -> None:
    port = free_port()
    base = live_api(api_settings(metrics_address=f"127.0.0.1:{port}"))
    assert httpx.get(f"{base}/metrics").status_code == 401
    r = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=deadlines.seconds(10))
    assert r.status_code == 200
    assert value(scrape(r.text), "rankzero_database_up") == 1


@pytest.mark.parametrize(
    ("le_counts", "total", "bounds", "expected"),
    [
        ((0, 0), 0, (1.0, 5.0), [("1.0", 0), ("5.0", 0), ("+Inf", 0)]),
        ((2, 3), 4, (1.0, 5.0), [("1.0", 2), ("5.0", 3), ("+Inf", 4)]),
        ((0,), 1, (1.0,), [("1.0", 0), ("+Inf", 1)]),
    ],
)
def test_cumulative_buckets(le_counts: tuple[int, ...], total: int, bounds: tuple[float, ...], expected: list) -> None:
    assert cumulative_buckets(le_counts, total, bounds) == [(le, float(n)) for le, n in expected]


class _Route:
    def __init__(self, path: str) -> None:
        self.path = path
        self.path_regex = re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", path) + "$")


@pytest.mark.parametrize(
    ("route", "path", "label"),
    [
        ("/jobs/{job_id}", "/api/jobs/17", "/api/jobs/{job_id}"),
        ("/jobs", "/api/jobs", "/api/jobs"),
        ("/metrics", "/metrics", "/metrics"),
        (None, "/api/../etc/passwd", "unmatched"),
    ],
)
def test_route_label(route: str | None, path: str, label: str) -> None:
    scope = {"path": path, **({"route": _Route(route)} if route else {})}
    assert route_label(scope) == label


@pytest.mark.parametrize(("code", "label"), [(200, "2xx"), (404, "4xx"), (503, "5xx"), (0, "other")])
def test_status_class(code: int, label: str) -> None:
    assert status_class(code) == label


def test_running_job_series_are_bounded_to_running_jobs() -> None:
    snap = Snapshot(
        jobs={("running", "p"): 1, ("succeeded", "p"): 5}, queued_ages_s={},
        queue_wait_le=(0, 1, 1, 2, *[2] * 8), queue_wait_count=2, queue_wait_sum_s=22.0,
        hosts=[], running=[RunningJob(7, "a", "p", 5, None, None, None)], points_ingested=9,
        deliveries={}, scheduler_lease_age_s=None,
    )  # fmt: skip
    by_name = {f.name: f for f in families(snap)}
    assert [s.labels["job"] for s in by_name["rankzero_job_step"].samples] == ["7"]
    assert by_name["rankzero_job_loss"].samples == []  # no loss yet: no sample, not a made-up 0
    assert {s.labels["status"] for s in by_name["rankzero_jobs"].samples} == {s.value for s in S}
    assert by_name["rankzero_queue_wait_seconds"].samples[-1].value == 22.0  # _sum


def test_the_grafana_dashboard_asks_only_for_metrics_the_service_exports(client: TestClient, db: Session) -> None:
    db.add(SchedulerLease(holder="test", renewed_at=utcnow()))
    db.commit()
    client.get("/api/jobs")
    text = client.get("/metrics").text
    families = set(re.findall(r"^# TYPE (\S+)", text, re.M))
    exported = families | {f"{f}{suffix}" for f in families for suffix in ("_bucket", "_count", "_sum", "_total")}
    dashboard = json.loads(DASHBOARD.read_text())
    asked = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"\brankzero_[a-z_]+", target["expr"])
    }
    assert asked and asked <= exported, asked - exported
