"""Two API processes serving one PostgreSQL database (issue 42 item 3): whichever answers, a job submitted
through one streams through the other, and a dashboard session (cookie + CSRF token) opened on one is
honoured by the other. Each process has a data dir of its own, as two hosts behind a load balancer would;
they share the database, the runs dir and RANKZERO_API_TOKEN (docs/deploy.md "More than one API")."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from sqlalchemy import insert
from sqlmodel import Session

from core.db import get_engine
from core.jobs import transition
from core.settings import Settings
from core.tables import JobStatus, MetricPoint
from tests.support.commands import RANKZERO, ROOT
from tests.support.jobs import DIGITS_SPEC
from tests.support.ports import free_port
from tests.support.procs import MARKER_ENV, end_everything, new_marker
from tests.support.services import wait_api_healthy
from tests.support.settings import API_TOKEN, settings_env

pytestmark = pytest.mark.postgres


@pytest.fixture
def two_apis(tmp_path: Path, api_settings, pg_url: str) -> Iterator[tuple[Settings, list[str]]]:
    settings = api_settings(database_url=pg_url)
    marker = new_marker()
    procs: list[subprocess.Popen[bytes]] = []
    bases: list[str] = []
    for n in range(2):
        port = free_port()
        env = settings_env(settings, RANKZERO_DATA_DIR=str(tmp_path / f"api{n}"), RANKZERO_PORT=str(port))
        env[MARKER_ENV] = marker
        with open(tmp_path / f"api{n}.log", "ab") as log:
            procs.append(
                subprocess.Popen([RANKZERO, "api", "--port", str(port)], cwd=ROOT, env=env, stdout=log,
                                 stderr=subprocess.STDOUT, start_new_session=True)
            )  # fmt: skip
        bases.append(f"http://127.0.0.1:{port}")
    try:
        for n, base in enumerate(bases):
            wait_api_healthy(base, [procs[n]], tmp_path / f"api{n}.log")
        yield settings, bases
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=30)
        end_everything(marker)


def _events(base: str, job_id: int, headers: dict[str, str]) -> list[tuple[str, str]]:
    """(event, data) of the job's stream until its `end` event."""
    out: list[tuple[str, str]] = []
    event = None
    with httpx.stream("GET", f"{base}/api/jobs/{job_id}/stream", headers=headers, timeout=120) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and event:
                out.append((event, line.split(":", 1)[1].strip()))
                if event == "end":
                    return out
    return out


def test_a_job_submitted_through_one_api_streams_through_the_other(two_apis) -> None:
    settings, (a, b) = two_apis
    headers = {"Authorization": f"Bearer {API_TOKEN}"}
    r = httpx.post(f"{a}/api/jobs", json=DIGITS_SPEC, headers=headers, timeout=30)
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    assert httpx.get(f"{b}/api/jobs/{job_id}", headers=headers, timeout=30).json()["status"] == "queued"

    def worker_writes() -> None:  # what the worker does, straight into the database
        with Session(get_engine(settings.resolved_database_url)) as s:
            time.sleep(0.5)
            transition(s, job_id, JobStatus.starting)
            transition(s, job_id, JobStatus.running)
            s.commit()
            s.execute(insert(MetricPoint), [
                {"job_id": job_id, "seq": i, "name": "train/loss", "step": i, "value": 1.0 / (i + 1), "time": 0.0}
                for i in range(50)
            ])  # fmt: skip
            s.commit()
            time.sleep(0.5)
            transition(s, job_id, JobStatus.succeeded)
            s.commit()

    with ThreadPoolExecutor(1) as pool:
        streamed = pool.submit(_events, b, job_id, headers)
        threading.Thread(target=worker_writes).start()
        events = streamed.result(timeout=180)
    statuses = [d for k, d in events if k == "status"]
    assert any('"running"' in d for d in statuses) and '"succeeded"' in statuses[-1], events
    steps = [p["step"] for k, d in events if k == "metrics" for p in json.loads(d)]
    assert steps == list(range(50)), steps
    assert events[-1][0] == "end"


def test_a_session_and_its_csrf_token_from_one_api_work_on_the_other(two_apis) -> None:
    _, (a, b) = two_apis
    with httpx.Client(base_url=a, timeout=30) as browser_a:
        r = browser_a.post("/login", data={"token": API_TOKEN}, headers={"Origin": a}, follow_redirects=False)
        assert r.status_code == 303, r.text
        cookies = dict(browser_a.cookies)
    csrf = cookies["rankzero_csrf"]
    with httpx.Client(base_url=b, timeout=30, cookies=cookies) as browser_b:
        assert browser_b.get("/api/jobs").status_code == 200  # the cookie signed by A reads through B
        submitted = browser_b.post("/api/jobs", json=DIGITS_SPEC, headers={"X-CSRF-Token": csrf})
        assert submitted.status_code == 201, submitted.text  # A's CSRF token is B's too
        refused = browser_b.post(f"/api/jobs/{submitted.json()['id']}/cancel", headers={"X-CSRF-Token": "x" * 43})
        assert refused.status_code == 403  # and a wrong one is refused there as well
        out = browser_b.post("/logout", data={"csrf": csrf}, headers={"Origin": b}, follow_redirects=False)
        assert out.status_code == 303
    with httpx.Client(base_url=a, timeout=30, cookies=cookies) as browser_a:
        assert browser_a.get("/api/jobs").status_code == 401  # signed out through B: gone on A too


def test_processes_sharing_a_data_dir_start_with_one_generated_token(tmp_path: Path) -> None:
    """API processes sharing a data dir and no configured token: whichever writes the token first, all
    read that one (a token read half-written, or two tokens, would sign half the sessions out)."""
    barrier = threading.Barrier(8)

    def token() -> str:
        barrier.wait()
        return Settings(data_dir=tmp_path / "shared").token()  # pyright: ignore[reportCallIssue]

    with ThreadPoolExecutor(8) as pool:
        tokens = set(pool.map(lambda _: token(), range(8)))
    assert len(tokens) == 1
    assert [p.name for p in (tmp_path / "shared").iterdir()] == ["api_token"]  # no draft left behind
