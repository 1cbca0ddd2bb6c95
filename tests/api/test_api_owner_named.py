"""Every answer that carries a JobPublic names the job's owner: the SSE stream's status events, cancel,
priority and an Idempotency-Key replay said `"owner": null` while the list and the job said "admin"."""

from __future__ import annotations

import json
import uuid

import httpx
from fastapi.testclient import TestClient

from core.settings import Settings
from core.tables import JobStatus
from tests.support import deadlines


def test_cancel_priority_and_replay_name_the_owner(client: TestClient, spec: dict) -> None:
    key = {"Idempotency-Key": uuid.uuid4().hex}
    made = client.post("/api/jobs", json=spec, headers=key)
    assert made.status_code == 201 and made.json()["owner"] == "admin", made.text
    job_id = made.json()["id"]
    replayed = client.post("/api/jobs", json=spec, headers=key)
    assert replayed.status_code == 200 and replayed.json()["owner"] == "admin", replayed.text
    moved = client.patch(f"/api/jobs/{job_id}", json={"priority": 5})
    assert moved.status_code == 200 and moved.json()["owner"] == "admin", moved.text
    cancelled = client.post(f"/api/jobs/{job_id}/cancel")
    assert cancelled.status_code == 202 and cancelled.json()["owner"] == "admin", cancelled.text


def test_the_streams_status_event_names_the_owner(live_api, settings: Settings, make_job, auth_headers) -> None:
    base = live_api(settings)
    job = make_job(status=JobStatus.succeeded, owner_id=1)  # the first admin (the server token's user)
    statuses = []
    with httpx.stream(
        "GET", f"{base}/api/jobs/{job.id}/stream", headers=auth_headers, timeout=deadlines.seconds(15)
    ) as r:
        event = None
        for line in r.iter_lines():
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and event == "status":
                statuses.append(json.loads(line.split(":", 1)[1]))
            elif event == "end":
                break
    assert statuses and statuses[0]["owner"] == "admin", statuses
