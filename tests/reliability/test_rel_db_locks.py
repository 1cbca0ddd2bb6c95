"""No transaction outlives its holder (issue 20 item 2), on a real PostgreSQL server.

A process frozen inside a transaction (SIGSTOP here) keeps its row locks until the server ends its
session (`db_idle_in_transaction_timeout_s`, set on every connection by core/db.py); until then the
scheduler places around the held row and an API write on it answers 503 "retry" instead of waiting.
Before the limits, the scheduler's pass and the cancel both waited on the lock for as long as the
holder stayed frozen (the joins below would time out).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlmodel import Session

from core import jobs
from core.db import get_engine, pg_connect_args
from core.migrate import upgrade
from core.settings import Settings, get_settings
from core.tables import Host, Job, JobStatus
from tests.support.settings import API_TOKEN

pytestmark = pytest.mark.postgres

REPO = Path(__file__).resolve().parents[2]
# A join only fails the test instead of hanging it: the code before the limits never returned.
NEVER_S = 60


def _submit(url: str) -> int:
    with Session(get_engine(url)) as s:
        job_id = jobs.create(s, "j", {"name": "j", "max_steps": 5, "device": "cpu"}, queue="rankzero").id
    assert job_id is not None
    return job_id


def _row(url: str, job_id: int) -> Job:
    row = jobs.get_job(get_engine(url), job_id)
    assert row is not None
    return row


def _host(url: str, name: str, slots: int) -> None:
    with Session(get_engine(url)) as s:
        s.add(Host(name=name, address="10.0.0.1", pool="rankzero", gpus=[], cpu_slots=slots, storage_id="s1",
                   heartbeat_at=datetime.now(timezone.utc)))  # fmt: skip
        s.commit()


@pytest.fixture
def limits(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """`limits(NAME=value, ...)`: RANKZERO_DB_* for this process's new engines and the processes it starts."""

    def set_(**values: Any) -> None:
        for name, value in values.items():
            monkeypatch.setenv(f"RANKZERO_DB_{name.upper()}", str(value))
        get_settings.cache_clear()

    yield set_
    get_settings.cache_clear()


def _run_in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    thread.start()
    return thread, out


def test_every_connection_carries_the_limits_and_keepalives(pg_url: str) -> None:
    with get_engine(pg_url).connect() as conn:
        shown = {name: conn.execute(text(f"SHOW {name}")).scalar_one() for name in
                 ("lock_timeout", "idle_in_transaction_session_timeout", "statement_timeout")}  # fmt: skip
        params = conn.connection.driver_connection.info.get_parameters()  # type: ignore[union-attr]
    assert shown == {"lock_timeout": "5s", "idle_in_transaction_session_timeout": "30s", "statement_timeout": "1min"}
    assert params["keepalives"] == "1" and params["keepalives_idle"] == "10", params
    assert pg_connect_args(Settings(db_keepalive_idle_s=3))["keepalives_idle"] == 3  # pyright: ignore[reportCallIssue]


def test_the_scheduler_places_around_a_held_row(api_settings, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A row held by another transaction (the test's own connection, no limits: a frozen holder still
    inside its idle window) leaves that job for a later pass; the other job is placed meanwhile."""
    from worker import scheduler

    monkeypatch.setattr(scheduler.queue, "send_node", lambda *a, **k: None)
    settings = api_settings(database_url=pg_url, stale_after_s=30)
    upgrade(pg_url)
    _host(pg_url, "host-a", 2)
    held, free = _submit(pg_url), _submit(pg_url)
    with psycopg.connect(pg_url) as holder:
        holder.execute("SELECT id FROM jobs WHERE id = %s FOR UPDATE", (held,))
        thread, _ = _run_in_thread(lambda: scheduler.schedule_once(settings))
        thread.join(NEVER_S)
        assert not thread.is_alive(), "the pass waited on the held row"
        assert holder.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS  # still held
        assert _row(pg_url, free).placement_id is not None
        assert _row(pg_url, held).placement_id is None
    scheduler.schedule_once(settings)  # the holder is gone: placed at the next pass
    assert _row(pg_url, held).placement_id is not None


def test_a_cancel_of_a_held_row_answers_retry_at_once(api_settings, pg_url: str, limits) -> None:
    """An API write never waits on a frozen holder: it gives up at db_lock_timeout_s with a 503 to retry."""
    from api.app import create_app

    limits(lock_timeout_s=0.5)
    upgrade(pg_url)
    job = _submit(pg_url)
    settings = api_settings(database_url=pg_url)
    with TestClient(create_app(settings), headers={"Authorization": f"Bearer {API_TOKEN}"}) as client:
        with psycopg.connect(pg_url) as holder:
            holder.execute("SELECT id FROM jobs WHERE id = %s FOR UPDATE", (job,))
            thread, out = _run_in_thread(lambda: client.post(f"/api/jobs/{job}/cancel"))
            thread.join(NEVER_S)
            assert not thread.is_alive(), "the cancel waited on the held row"
            assert holder.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS  # still held
            assert out[0].status_code == 503 and out[0].headers["Retry-After"], out[0].text
        answer = client.post(f"/api/jobs/{job}/cancel")  # the holder is gone: the retry goes through
        assert answer.status_code == 202 and answer.json()["status"] == "cancelled", answer.text


HOLDER = """
import sys
from sqlalchemy import text
from core.db import get_engine
conn = get_engine(sys.argv[1]).connect()
conn.execute(text("SELECT id FROM jobs WHERE id = :j FOR UPDATE"), {"j": int(sys.argv[2])})
print("held", flush=True)
sys.stdin.read()
"""


def test_a_frozen_holder_is_ended_by_the_server_and_the_cancel_goes_through(api_settings, pg_url: str, limits) -> None:
    """A rankzero process SIGSTOPped inside a transaction: the server ends its session after
    db_idle_in_transaction_timeout_s and the cancel goes through while the process is still frozen."""
    from api.app import create_app

    limits(idle_in_transaction_timeout_s=1, lock_timeout_s=NEVER_S)  # the cancel waits: for the server only
    upgrade(pg_url)
    job = _submit(pg_url)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, pg_url, str(job)],
        cwd=REPO, text=True, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        os.kill(holder.pid, signal.SIGSTOP)
        settings = api_settings(database_url=pg_url)
        with TestClient(create_app(settings), headers={"Authorization": f"Bearer {API_TOKEN}"}) as client:
            thread, out = _run_in_thread(lambda: client.post(f"/api/jobs/{job}/cancel"))
            thread.join(NEVER_S)
            assert not thread.is_alive(), "the cancel waited on the frozen holder"
            assert out[0].status_code == 202 and out[0].json()["status"] == "cancelled", out[0].text
        assert holder.poll() is None and _state(holder.pid) == "T"  # still frozen: the server ended its session
        assert _row(pg_url, job).status == JobStatus.cancelled
    finally:
        os.kill(holder.pid, signal.SIGCONT)
        holder.kill()
        holder.wait()


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
