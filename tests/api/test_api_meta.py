"""GET /api/meta publishes the job state sets and the limits the routes enforce (clients read them instead of
copying them); the placement a job row holds reaches GET /api/jobs and GET /api/hosts typed, through one
accessor, and /openapi.json carries its shape."""

from __future__ import annotations

from datetime import datetime, timezone

from fastapi.testclient import TestClient
from sqlmodel import Session

from core.job_state import CANCELLABLE, HOLDING, LIVE, ORDER, TERMINAL
from core.tables import Host, JobStatus

PLACED = {
    "nodes": [
        {"host": "host-a", "node_rank": 0, "gpus": ["0", "1"], "slots": 0, "address": "10.0.0.1"},
        {"host": "host-b", "node_rank": 1, "gpus": ["3"], "slots": 0, "address": "host-b"},
    ],
    "nproc": 2,
    "accumulation_steps": 4,
}


def _names(states) -> list[str]:
    return [s.value for s in ORDER if s in states]


def test_meta_publishes_the_state_sets_of_core_job_state(client: TestClient) -> None:
    states = client.get("/api/meta").json()["states"]
    assert states == {
        "all": ["queued", "starting", "running", "cancelling", "succeeded", "failed", "cancelled"],
        "terminal": _names(TERMINAL),
        "live": _names(LIVE),
        "holding": _names(HOLDING),
        "cancellable": _names(CANCELLABLE),
    }
    assert states["terminal"] == ["succeeded", "failed", "cancelled"]


def test_meta_needs_credentials_like_every_api_route(anon_client: TestClient) -> None:
    assert anon_client.get("/api/meta").status_code == 401


def test_the_published_limits_are_the_ones_the_routes_enforce(client: TestClient, make_job, db: Session) -> None:
    limits = client.get("/api/meta").json()["limits"]
    job_id = make_job(name="limits").id
    db.commit()
    page = limits["jobs_page"]
    assert client.get("/api/jobs", params={"limit": page}).status_code == 200
    assert client.get("/api/jobs", params={"limit": page + 1}).status_code == 422
    points = limits["metric_points"]
    metrics = f"/api/jobs/{job_id}/metrics"
    assert points["min"] <= points["default"] <= points["max"]
    for ok in (points["min"], points["max"]):
        assert client.get(metrics, params={"max_points": ok}).status_code == 200
    for bad in (points["min"] - 1, points["max"] + 1):
        assert client.get(metrics, params={"max_points": bad}).status_code == 422
    names = [f"s{i}" for i in range(limits["metric_names"])]
    assert client.get(metrics, params={"name": names}).status_code == 200
    assert client.get(metrics, params={"name": [*names, "one-more"]}).status_code == 422
    assert client.get(metrics, params={"name": "x" * limits["metric_name_chars"]}).status_code == 200
    assert client.get(metrics, params={"name": "x" * (limits["metric_name_chars"] + 1)}).status_code == 422
    logs = f"/api/jobs/{job_id}/logs"
    assert client.get(logs, params={"limit": limits["log_bytes"] + 1}).status_code == 422


def test_a_placed_job_shows_its_placement_typed(client: TestClient, make_job, db: Session) -> None:
    job = make_job(name="placed", status=JobStatus.running, placement=PLACED, placement_id="p1")
    db.commit()
    assert client.get(f"/api/jobs/{job.id}").json()["placement"] == PLACED
    listed = client.get("/api/jobs").json()["items"][0]
    assert listed["placement"] == PLACED


def test_hand_written_and_damaged_placements_still_list(client: TestClient, make_job, db: Session) -> None:
    bare = {"nodes": [{"host": "h", "node_rank": 0, "slots": 1}], "nproc": 1, "accumulation_steps": 1}
    old = make_job(name="old", status=JobStatus.running, placement=bare, placement_id="p1")
    broken = make_job(name="broken", status=JobStatus.running, placement={"nodes": "h"}, placement_id="p2")
    db.commit()
    shown = client.get(f"/api/jobs/{old.id}").json()["placement"]
    assert shown == {"nodes": [{"host": "h", "node_rank": 0, "gpus": [], "slots": 1, "address": None}],
                     "nproc": 1, "accumulation_steps": 1}  # fmt: skip
    assert client.get(f"/api/jobs/{broken.id}").json()["placement"] is None  # shown without it, not a 500
    assert client.get("/api/jobs").status_code == 200


def test_hosts_count_what_placements_hold(client: TestClient, make_job, db: Session) -> None:
    now = datetime.now(timezone.utc)
    for name, gpus in (("host-a", ["0", "1", "2"]), ("host-b", ["3"])):
        db.add(Host(name=name, address=name, pool="rankzero", gpus=gpus, cpu_slots=4, storage_id="s", heartbeat_at=now))
    job = make_job(name="placed", status=JobStatus.running, placement=PLACED, placement_id="p1")
    make_job(name="broken", status=JobStatus.running, placement={"nodes": [{"host": "host-a"}]}, placement_id="p2")
    make_job(name="done", status=JobStatus.succeeded, placement=PLACED)  # a finished job holds nothing
    db.commit()
    hosts = {h["name"]: h for h in client.get("/api/hosts").json()}
    assert hosts["host-a"]["free_gpus"] == ["2"] and hosts["host-b"]["free_gpus"] == []
    assert hosts["host-a"]["jobs"] == [{"id": job.id, "name": "placed", "node_rank": 0}]
    assert hosts["host-b"]["jobs"] == [{"id": job.id, "name": "placed", "node_rank": 1}]


def test_openapi_carries_the_placement_and_meta_shapes(client: TestClient) -> None:
    doc = client.get("/openapi.json").json()
    schemas = doc["components"]["schemas"]
    placement = schemas["JobPublic"]["properties"]["placement"]
    assert {"$ref": "#/components/schemas/JobPlacement"} in placement["anyOf"]
    assert set(schemas["PlacedNode"]["properties"]) == {"host", "node_rank", "gpus", "slots", "address"}
    assert set(schemas["JobPlacement"]["required"]) == {"nodes", "nproc", "accumulation_steps"}
    meta = doc["paths"]["/api/meta"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert meta == {"$ref": "#/components/schemas/Meta"}
