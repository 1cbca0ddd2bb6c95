"""The whole service with the real trainer: REST → broker → Celery worker → torchrun → database.

Runs on SQLite with the embedded (SQLAlchemy) transport and on PostgreSQL with Redis.
"""

from __future__ import annotations

import hashlib
import secrets
import time

import pytest

from tests.support.jobs import TERMINAL
from tests.support.procs import alive, job_pids

REDIS = "redis://127.0.0.1:6379/{db}"


def _spec(name: str, **kw):
    spec = {"name": name, "model": {"name": "mlp"}, "data": {"name": "digits"}, "batch_size": 16, "max_steps": 24,
            "device": "cpu", "log_every": 3, "optimizer": {"name": "sgd", "lr": 0.1},
            "checkpoint": {"every_steps": 12, "every_epochs": None}}  # fmt: skip
    spec.update(kw)
    return spec


@pytest.fixture(
    params=["sqlite-embedded", pytest.param("postgres-redis", marks=[pytest.mark.postgres, pytest.mark.redis])]
)
def backend(request, monkeypatch, tmp_path):
    if request.param == "sqlite-embedded":
        yield {}
        return
    import redis

    db = 8 + secrets.randbelow(8)
    url = REDIS.format(db=db)
    try:
        redis.Redis.from_url(url).ping()
    except Exception as exc:
        pytest.fail(f"Redis on 127.0.0.1:6379 is not reachable (the suite needs it): {exc}")
    queue = f"rankzero-test-{secrets.token_hex(4)}"
    monkeypatch.setenv("RANKZERO_QUEUE", queue)  # our own queue: other runs on this Redis never see our jobs
    yield {"database_url": request.getfixturevalue("pg_url"), "broker_url": url, "_queue": queue}
    client = redis.Redis.from_url(url)
    keys = [k for k in client.keys("*") if queue.encode() in k]
    if keys:
        client.delete(*keys)


def _check_succeeded(client, job_id: int) -> None:
    job = client.job(job_id)
    assert job["status"] == "succeeded", job
    assert job["step"] == 24 and job["latest_loss"] is not None
    series = client.http.get(f"/jobs/{job_id}/metrics", params={"name": "train/loss"}).json()["series"][0]
    values = [p["value"] for p in series["points"]]
    assert len(values) == 8 and values[-1] < values[0], values
    ckpts = client.http.get(f"/jobs/{job_id}/checkpoints").json()
    latest = max(ckpts, key=lambda c: c["step"])
    assert latest["step"] == 24
    body = client.http.get(f"/checkpoints/{latest['id']}/download").content
    assert hashlib.sha256(body).hexdigest() == latest["sha256"] and len(body) == latest["bytes"]


def test_ddp_and_accumulation_jobs_succeed(service, workers, backend):
    queue = backend.pop("_queue", None)
    settings, client = service(**backend)
    workers.start(
        settings, fake=False, pool="threads", concurrency=2, extra_env={"RANKZERO_QUEUE": queue} if queue else None
    )
    ddp = client.submit(_spec("ddp", nproc=2))
    acc = client.submit(_spec("acc", accumulation_steps=2))
    assert ddp["strategy"] == "DDP 2" and acc["strategy"] == "acc 2"
    for job in (ddp, acc):
        client.wait_terminal(job["id"], timeout=150)
    _check_succeeded(client, ddp["id"])
    _check_succeeded(client, acc["id"])


def test_cancel_real_job(service, workers):

    settings, client = service(cancel_grace_s=5.0)
    workers.start(settings, fake=False)
    job = client.submit(_spec("long", nproc=2, max_steps=100000))
    client.wait(job["id"], lambda j: j["status"] == "running" and j["step"] > 0, 90, "first steps")
    launched = job_pids(workers.marker, job["id"])
    assert launched
    t0 = time.monotonic()
    client.http.post(f"/jobs/{job['id']}/cancel").raise_for_status()
    # The mechanism, not a time (load stretches any): cancelled, and no process of the job left on the host.
    done = client.wait(job["id"], lambda j: j["status"] in TERMINAL, 120, "cancelled")
    print(f"cancel took {time.monotonic() - t0:.1f} s (grace 5 s)")
    assert done["status"] == "cancelled"
    left = [p for p in launched if alive(p)]
    assert not left and not job_pids(workers.marker, job["id"])
