"""Placement across hosts: a job behind a busy host starts on the idle one, the queue is ordered by
priority, a queued job says why it waits, and elastic fit starts a job on the ranks that are free."""

from __future__ import annotations

import os
import subprocess
import time
from typing import Any

import pytest

from tests.support.commands import RANKZERO
from tests.support.jobs import assert_same_weights, reference_weights, run_dir, slow_spec, wait, wait_step_written


def _cli(*args: str) -> str:
    out = subprocess.run([RANKZERO, *args], capture_output=True, text=True, timeout=60, env={**os.environ,
                         "COLUMNS": "200"}, check=False)  # fmt: skip
    assert out.returncode == 0, out.stderr
    return out.stdout


def _long(name: str, **kw: Any) -> dict[str, Any]:
    return slow_spec(name, step_s=0.2, max_steps=1000, every=1000, **kw)


def test_job_behind_a_busy_host_starts_on_the_idle_one_and_waiting_says_why(service, workers, start_host) -> None:
    settings, client = service()
    start_host(settings, "host-a", 2)
    busy = client.submit(_long("busy-a"))
    client.wait(busy["id"], lambda j: j["status"] == "running", 90, "running")
    assert [n["host"] for n in client.job(busy["id"])["placement"]["nodes"]] == ["host-a"]

    waiting = client.submit(slow_spec("two-slots", step_s=0.01, max_steps=5, every=5))
    reason = client.wait(waiting["id"], lambda j: j["pending_reason"], 30, "a pending reason")["pending_reason"]
    assert "2" in reason and "host-a" in reason, reason  # what it needs, and what the host has free
    # The CLI says it too, and shows the hosts.
    base = ["--url", str(client.http.base_url).removesuffix("/api/"), "--token", settings.token()]
    shown = _cli("show", str(waiting["id"]), *base)
    assert "waiting" in shown and "host-a" in shown, shown
    listed = _cli("hosts", *base)
    assert "host-a" in listed and "0/2 slots" in listed and f"{busy['id']} busy-a" in listed, listed

    start_host(settings, "host-b", 2)  # an idle host joins: the waiting job goes there, not behind host-a
    done = client.wait_terminal(waiting["id"], 120)
    assert done["status"] == "succeeded", done
    assert [n["host"] for n in done["placement"]["nodes"]] == ["host-b"]
    assert client.job(busy["id"])["status"] == "running"
    client.http.post(f"/jobs/{busy['id']}/cancel")
    client.wait_terminal(busy["id"], 60)


def test_priority_orders_the_queue_and_can_change_while_queued(service, workers, start_host) -> None:
    settings, client = service()
    start_host(settings, "host-a", 1)
    blocker = client.submit(slow_spec("blocker", step_s=0.1, max_steps=30, every=1000, nproc=1))
    client.wait(blocker["id"], lambda j: j["status"] == "running", 90, "running")
    low = client.submit(slow_spec("low", step_s=0.01, max_steps=3, every=1000, nproc=1))
    high = client.submit(slow_spec("high", step_s=0.01, max_steps=3, every=1000, nproc=1, priority=5))
    later = client.submit(slow_spec("later", step_s=0.01, max_steps=3, every=1000, nproc=1))
    r = client.http.patch(f"/jobs/{later['id']}", json={"priority": 10})  # bumped while it waits
    assert r.status_code == 200 and r.json()["priority"] == 10, r.text
    assert client.http.patch(f"/jobs/{blocker['id']}", json={"priority": 3}).status_code == 409
    ends = {j["name"]: client.wait_terminal(j["id"], 180) for j in (later, high, low)}
    assert all(j["status"] == "succeeded" for j in ends.values()), ends
    order = sorted(ends, key=lambda name: ends[name]["started_at"])
    assert order == ["later", "high", "low"], order


def test_preempted_job_checkpoints_resumes_and_ends_at_the_same_weights(service, workers, start_host, tmp_path) -> None:
    settings, client = service()
    start_host(settings, "host-a", 2)
    # Slow steps (no change to the math): the victim must still be training when the urgent job is placed.
    spec = slow_spec("victim", step_s=0.3, max_steps=40, every=5, preemptible=True)
    victim = client.submit(spec)
    wait_step_written(run_dir(settings, victim["id"]), 7, 120)  # the trainer's record; the API's step lags it
    urgent = client.submit(slow_spec("urgent", step_s=0.01, max_steps=5, every=5, priority=10))
    done = client.wait_terminal(urgent["id"], 120)
    assert done["status"] == "succeeded", done
    ended = client.wait_terminal(victim["id"], 240)
    assert ended["status"] == "succeeded" and ended["attempt"] == 2 and ended["restarts_used"] == 0, ended
    timeline = client.job(victim["id"])["transitions"]
    assert any("preempted to make room for job" in (t["detail"] or "") for t in timeline), timeline
    final = run_dir(settings, victim["id"]) / "checkpoints" / f"step_{40:08d}.pt"
    assert_same_weights(final, reference_weights(spec, tmp_path / "ref"))


def test_elastic_job_starts_on_the_free_slots_with_more_accumulation(service, workers, start_host, tmp_path) -> None:
    settings, client = service(max_cpu_ranks=4)
    start_host(settings, "host-a", 2)
    spec = slow_spec("elastic", step_s=0.01, max_steps=12, every=6, nproc=4, min_nproc=1)
    job = client.submit(spec)
    done = client.wait_terminal(job["id"], 150)
    assert done["status"] == "succeeded", done
    assert done["placement"]["nproc"] == 2 and done["placement"]["accumulation_steps"] == 2, done["placement"]
    running = [t["detail"] for t in done["transitions"] if t["status"] == "running"]
    assert any("running on 2 of 4 ranks (accumulation ×2)" in (d or "") for d in running), running
    final = run_dir(settings, job["id"]) / "checkpoints" / f"step_{12:08d}.pt"
    # The reference: 1 rank × accumulation 4 (reference_weights folds nproc into accumulation).
    assert_same_weights(final, reference_weights({**spec, "min_nproc": None}, tmp_path / "ref"))


def test_a_job_no_host_could_ever_fit_is_refused_from_the_host_table(service, workers, start_host) -> None:
    settings, client = service(max_cpu_ranks=64)
    start_host(settings, "host-a", 2)
    wait(lambda: client.http.get("/hosts").json(), 30, "host-a registered")
    r = client.http.post("/jobs", json=slow_spec("too-big", nproc=4))
    assert r.status_code == 422 and "host-a" in r.text or "2" in r.text, r.text
    r = client.http.post("/jobs", json=slow_spec("three-nodes", nproc=1, nnodes=3))
    assert r.status_code == 422, r.text
    hosts = client.http.get("/hosts").json()
    assert [h["name"] for h in hosts] == ["host-a"] and hosts[0]["cpu_slots"] == 2 and hosts[0]["alive"], hosts


@pytest.mark.postgres
def test_exactly_one_scheduler_is_active_and_it_moves_when_its_worker_dies(service, workers, start_host, pg_url):
    from sqlalchemy import create_engine, text

    settings, client = service(database_url=pg_url)
    procs = {start_host(settings, "host-a", 1).pid, start_host(settings, "host-b", 1).pid}
    engine = create_engine(pg_url)

    def leader() -> int | None:
        """The pid in the scheduler's lease, while it is fresh (renewed within its 10 s)."""
        with engine.connect() as conn:
            row = conn.execute(text("SELECT holder, now() - renewed_at < interval '10 seconds' FROM scheduler_lease"))
            found = row.first()
        return int(found[0].split("pid=")[1].split()[0]) if found and found[1] else None

    first = wait(leader, 30, "a scheduler to take the lease")
    assert first in procs, (first, procs)
    job = client.submit(slow_spec("scheduled", step_s=0.01, max_steps=3, every=3, nproc=1))
    assert client.wait_terminal(job["id"], 90)["status"] == "succeeded"
    for _ in range(5):  # the other candidate never takes a lease that is renewed
        assert leader() == first
        time.sleep(0.5)
    workers.stop(next(p for p in workers.procs if p.pid == first))  # SIGKILL the leading worker
    moved = wait(lambda: (pid := leader()) not in (None, first) and pid, 40, "the other worker to take over")
    assert moved in procs, moved
    job = client.submit(slow_spec("after", step_s=0.01, max_steps=3, every=3, nproc=1))
    assert client.wait_terminal(job["id"], 90)["status"] == "succeeded"
    engine.dispose()
