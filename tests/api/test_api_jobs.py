"""Submit, list (paging, filters), show and cancel, on SQLite and PostgreSQL."""

from __future__ import annotations

from fastapi.testclient import TestClient

from core.tables import JobStatus


def test_submit_returns_queued_job_with_derived_fields(client: TestClient, spec: dict) -> None:
    r = client.post("/api/jobs", json={**spec, "accumulation_steps": 4, "batch_size": 8})
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["status"] == "queued" and job["name"] == "digits-ddp"
    assert job["global_batch_size"] == 8 * 4 * 2 and job["strategy"] == "DDP 2 × acc 4"
    assert job["spec"]["optimizer"]["name"] == "sgd"  # defaults are stored, so the run is reproducible
    detail = client.get(f"/api/jobs/{job['id']}").json()
    assert [t["status"] for t in detail["transitions"]] == ["queued"]


def test_list_pages_newest_first_and_filters(client: TestClient, spec: dict, make_job) -> None:
    for i in range(5):
        make_job(name=f"alpha-{i}")
    make_job(name="beta", status=JobStatus.running)
    make_job(name="gamma", status=JobStatus.failed)
    page = client.get("/api/jobs", params={"limit": 3, "offset": 0}).json()
    assert page["total"] == 7 and page["limit"] == 3 and len(page["items"]) == 3
    assert [j["name"] for j in page["items"]] == ["gamma", "beta", "alpha-4"]
    page2 = client.get("/api/jobs", params={"limit": 3, "offset": 6}).json()
    assert [j["name"] for j in page2["items"]] == ["alpha-0"]
    assert client.get("/api/jobs", params={"status": "running"}).json()["total"] == 1
    both = client.get("/api/jobs", params=[("status", "running"), ("status", "failed")]).json()
    assert {j["name"] for j in both["items"]} == {"beta", "gamma"}
    assert client.get("/api/jobs", params={"name": "alpha"}).json()["total"] == 5
    assert client.get("/api/jobs", params={"name": "_"}).json()["total"] == 0  # LIKE wildcards are literal
    assert client.get("/api/jobs", params={"name": "%"}).status_code == 422  # not a job-name character
    assert client.get("/api/jobs", params={"status": "bogus"}).status_code == 422


def test_validation_error_points_at_the_field(client: TestClient, spec: dict) -> None:
    r = client.post("/api/jobs", json={**spec, "optimizer": {"lr": -1}})
    assert r.status_code == 422
    assert ["body", "optimizer", "lr"] in [e["loc"] for e in r.json()["detail"]]
    r = client.post("/api/jobs", json={**spec, "bogus_field": 1})
    assert r.status_code == 422 and ["body", "bogus_field"] in [e["loc"] for e in r.json()["detail"]]


def test_cancel_queued_running_and_finished(client: TestClient, spec: dict, make_job, db) -> None:
    queued, running, done = make_job(), make_job(status=JobStatus.running), make_job(status=JobStatus.succeeded)
    r = client.post(f"/api/jobs/{queued.id}/cancel")
    assert r.status_code == 202 and r.json()["status"] == "cancelled" and r.json()["finished_at"]
    r = client.post(f"/api/jobs/{running.id}/cancel")
    assert r.status_code == 202 and r.json()["status"] == "cancelling"
    assert client.post(f"/api/jobs/{running.id}/cancel").json()["status"] == "cancelling"  # idempotent
    r = client.post(f"/api/jobs/{done.id}/cancel")
    assert r.status_code == 409 and "succeeded" in r.json()["detail"]
    timeline = client.get(f"/api/jobs/{queued.id}").json()["transitions"]
    assert [t["status"] for t in timeline] == ["queued", "cancelled"]


def test_unknown_and_malformed_ids(client: TestClient, spec: dict) -> None:
    assert client.get("/api/jobs/999999").status_code == 404
    for bad in ("abc", "1.5", "-1", "0", "99999999999999999999", "1;drop", "%2e%2e"):
        assert client.get(f"/api/jobs/{bad}").status_code in (404, 422), bad
        assert client.get(f"/api/jobs/{bad}").status_code != 500
    assert client.get("/api/jobs/abc").status_code == 422
    assert client.get("/api/jobs/99999999999999999999").status_code == 422
    assert client.post("/api/jobs/0/cancel").status_code == 422
    assert client.get("/api/checkpoints/abc/download").status_code == 422


def test_health_and_schema(client: TestClient, anon_client: TestClient) -> None:
    assert anon_client.get("/api/health").json() == {"status": "ok", "database": "ok"}
    schema = client.get("/api/schema/job-spec").json()
    assert "nproc" in schema["properties"]
    assert client.get("/openapi.json").status_code == 200


def test_database_gone_is_503_not_500(api_settings, pg_url: str, auth_headers: dict) -> None:
    import psycopg

    from api.app import create_app
    from core.db import get_engine

    app = create_app(api_settings(database_url=pg_url))
    with TestClient(app, headers=auth_headers, raise_server_exceptions=False) as c:
        assert c.get("/api/jobs").status_code == 200
        get_engine(pg_url).dispose()
        name = pg_url.rsplit("/", 1)[1]
        with psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        r = c.get("/api/jobs")
        assert r.status_code == 503 and r.headers["retry-after"] == "5" and "retry" in r.json()["detail"]
        assert c.get("/api/health").status_code == 503
