"""POST /jobs with an Idempotency-Key: a client retry never creates a second job (hardening item 14)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
from fastapi.testclient import TestClient
from sqlalchemy import func
from sqlmodel import Session, select

from core.tables import Job


def _count(db: Session) -> int:
    db.expire_all()
    return db.exec(select(func.count()).select_from(Job)).one()


def test_a_retry_returns_the_same_job(client: TestClient, spec: dict, db: Session) -> None:
    key = {"Idempotency-Key": "0b9f3c52-7a7e-4bfa-9a52-1f7d1c4f3e11"}
    first = client.post("/api/jobs", json=spec, headers=key)
    again = client.post("/api/jobs", json=spec, headers=key)
    assert first.status_code == 201 and again.status_code == 200, again.text
    assert again.json()["id"] == first.json()["id"] and again.headers["Idempotent-Replayed"] == "true"
    assert _count(db) == 1
    other = client.post("/api/jobs", json={**spec, "max_steps": 7}, headers=key)
    assert other.status_code == 409 and f"job {first.json()['id']}" in other.json()["detail"]
    assert client.post("/api/jobs", json=spec).status_code == 201  # no key: a new job each time
    assert _count(db) == 2


def test_bad_keys_are_refused(client: TestClient, spec: dict) -> None:
    for bad in ("x" * 201, "has space", ""):
        r = client.post("/api/jobs", json=spec, headers={"Idempotency-Key": bad})
        assert r.status_code == 422, (bad, r.text)


def test_concurrent_retries_create_one_job(settings, live_api, auth_headers, spec: dict, db: Session) -> None:
    url = live_api(settings)
    key = {"Idempotency-Key": "retry-storm-1", **auth_headers}

    def submit(_: int) -> tuple[int, int]:
        r = httpx.post(f"{url}/api/jobs", json=spec, headers=key, timeout=30)
        return r.status_code, r.json()["id"]

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(submit, range(8)))
    assert sorted(code for code, _ in results).count(201) == 1, results
    assert {code for code, _ in results} <= {200, 201} and len({job for _, job in results}) == 1
    assert _count(db) == 1
