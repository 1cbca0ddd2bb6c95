"""Supervisor behaviour with real Celery workers and torchrun, using the torch-free stand-in trainer."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.commands import ROOT
from tests.support.jobs import fake_spec, run_dir, wait, wait_step_written
from tests.support.procs import alive, job_pids, ranks, wait_ranks


def _alive(pid: int) -> bool:
    return alive(pid)


def test_cancel_running_job_leaves_no_process(service, workers):
    settings, client = service(cancel_grace_s=3.0)
    workers.start(settings)
    job = client.submit(fake_spec(max_steps=100000, behaviour={"step_s": 0.1}, nproc=2))
    client.wait(job["id"], lambda j: j["status"] == "running" and j["step"] >= 2, 60, "running")
    launched = job_pids(workers.marker, job["id"])
    assert len(launched) >= 3  # torchrun + 2 ranks
    # The ranks as the host sees them (inside the job's sandbox they have pids of its own namespace).
    rank_pids = list(ranks(workers.marker, job["id"]).values())
    assert len(rank_pids) == 2
    t0 = time.monotonic()
    assert client.http.post(f"/jobs/{job['id']}/cancel").status_code == 202
    # The mechanism, not a time (load stretches any): cancelled, the ranks gone, their SIGTERM checkpoint below.
    done = client.wait_terminal(job["id"], timeout=120)
    print(f"cancel took {time.monotonic() - t0:.1f} s (grace 3 s)")
    assert done["status"] == "cancelled"
    left = [p for p in rank_pids + launched if _alive(p)]
    assert not left, f"processes left after cancel: {left}"
    # The trainer checkpointed on SIGTERM and that checkpoint was ingested.
    run = Path(settings.resolved_runs_dir) / f"job_{job['id']}"
    events = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]
    assert events[-1]["type"] == "stopped"


def test_cancelled_queued_job_never_starts(service, workers):
    settings, client = service()
    job = client.submit(fake_spec())
    assert client.http.post(f"/jobs/{job['id']}/cancel").status_code == 202
    workers.start(settings)
    probe = client.submit(fake_spec("probe", max_steps=2))
    assert client.wait_terminal(probe["id"], 60)["status"] == "succeeded"
    job = client.job(job["id"])
    assert job["status"] == "cancelled" and job["attempt"] == 0
    assert not (Path(settings.resolved_runs_dir) / f"job_{job['id']}").exists()


def test_same_message_twice_runs_once(service, workers):
    from core import hosts, jobs
    from core.db import get_engine
    from core.queue import send_node

    settings, client = service()
    workers.start(settings, pool="prefork", concurrency=2)
    job = client.submit(fake_spec(max_steps=30, behaviour={"step_s": 0.1}))
    engine = get_engine(settings.resolved_database_url)
    row = wait(lambda: (r := jobs.get_job(engine, job["id"])) and r.placement_id and r, 60, "the job placed")
    node_queue = hosts.host_queue(settings.queue, row.placement["nodes"][0]["host"])
    # The same node message again, twice (a redelivery after visibility_timeout, a resent placement).
    send_node(job["id"], 0, row.placement_id, node_queue, settings)
    send_node(job["id"], 0, row.placement_id, node_queue, settings)
    done = client.wait_terminal(job["id"], 60)
    assert done["status"] == "succeeded" and done["attempt"] == 1
    run = Path(settings.resolved_runs_dir) / f"job_{job['id']}"
    started = [e for e in map(json.loads, (run / "events.jsonl").read_text().splitlines()) if e["type"] == "started"]
    assert len(started) == 1
    assert [p.name for p in (run / "logs").iterdir() if p.is_dir()] == ["attempt_1"]

    # A duplicate consumed after the claim finds nothing to do; one consumed beside the first delivery
    # loses the fenced claim. Either way it launches nothing (one `started`, one attempt, above).
    def no_ops() -> int:
        log = workers.log(0)
        return log.count("nothing to do") + log.count("claimed by another delivery")

    wait(lambda: no_ops() >= 2, 30, "both duplicates consumed as no-ops")


def test_failed_rank_is_named_with_traceback(service, workers):
    settings, client = service()
    workers.start(settings)
    job = client.submit(fake_spec(nproc=2, behaviour={"fail_rank": 1, "fail_at_step": 3}))
    done = client.wait_terminal(job["id"], 60)
    assert done["status"] == "failed"
    assert done["failed_rank"] == 1
    assert done["exit_code"] not in (None, 0)
    assert "boom at step 3" in done["error"] and "Traceback" in done["error"]


def test_restart_from_checkpoint_within_max_restarts(service, workers):
    settings, client = service()
    workers.start(settings)
    # Fails at step 12 on attempt 1 (checkpoint at 10); attempt 2 resumes at 10 and also fails
    # at 12, so with max_restarts 1 the job ends failed at attempt 2 with no duplicate points.
    job = client.submit(fake_spec(max_restarts=1, behaviour={"fail_rank": 0, "fail_at_step": 12}))
    done = client.wait_terminal(job["id"], 90)
    assert done["status"] == "failed" and done["attempt"] == 2
    steps = [
        p["step"]
        for p in client.http.get(f"/jobs/{job['id']}/metrics", params={"name": "train/loss"}).json()["series"][0][
            "points"
        ]
    ]
    assert steps == list(range(1, 12))


def test_gpu_jobs_share_fake_gpus_in_order(service, workers, tmp_path):
    settings, client = service(gpus="0,1,2")
    workers.start(settings, pool="prefork", concurrency=3)
    # Each rank notes the CUDA_VISIBLE_DEVICES it got in <run dir>/pids (inside the job's sandbox view).
    a = client.submit(
        fake_spec("a", nproc=2, device="cuda", max_steps=25, behaviour={"step_s": 0.05, "pid_dir": "pids"})
    )
    b = client.submit(fake_spec("b", nproc=2, device="cuda", max_steps=5, behaviour={"pid_dir": "pids"}))
    c = client.submit(fake_spec("c", nproc=1, device="cuda", max_steps=5, behaviour={"pid_dir": "pids"}))
    runs = Path(settings.resolved_runs_dir)
    pids = {n: runs / f"job_{j['id']}" / "pids" for n, j in zip("abc", (a, b, c), strict=True)}
    r = client.http.post("/jobs", json=fake_spec("too-big", nproc=4, device="cuda"))
    assert r.status_code == 422 and "3" in r.text and "GPU" in r.text, r.text
    done = {n: client.wait_terminal(j["id"], 90) for n, j in zip("abc", (a, b, c), strict=True)}
    assert all(j["status"] == "succeeded" for j in done.values()), done

    def seen(n: str) -> set[str]:
        return {g for p in pids[n].iterdir() for g in p.read_text().split()[1].split(",")}

    ga, gb, gc = seen("a"), seen("b"), seen("c")
    assert len(ga) == 2 and len(gb) == 2 and len(gc) == 1 and ga | gb | gc <= {"0", "1", "2"}
    # a and b need 2 of 3 GPUs each: they never ran at the same time.
    a_, b_ = done["a"], done["b"]
    assert a_["finished_at"] <= b_["started_at"] or b_["finished_at"] <= a_["started_at"], (a_, b_)


def test_a_node_leases_exactly_its_placed_gpus_waiting_for_the_previous_holder(api_settings):
    import threading

    from worker import gpus

    settings = api_settings(gpus="0,1,2")
    previous = gpus.lease_exact(settings, ["1", "2"], keep_waiting=lambda: True)
    got: list[gpus.GpuLease | None] = []
    t = threading.Thread(target=lambda: got.append(gpus.lease_exact(settings, ["2"], keep_waiting=lambda: True,
                                                                      poll_s=0.02)))  # fmt: skip
    t.start()
    time.sleep(0.3)
    assert got == []  # GPU 2 is still the previous job's (its supervisor is recording its outcome)
    previous.release()
    t.join(5)
    assert got and got[0] is not None and got[0].gpus == ["2"]
    # Cancelled (or placed again) while waiting: no lease, nothing held.
    assert gpus.lease_exact(settings, ["2"], keep_waiting=lambda: False, poll_s=0.01) is None
    got[0].release()
    with pytest.raises(ValueError, match="does not have"):
        gpus.lease_exact(settings, ["7"], keep_waiting=lambda: True)


def test_worker_does_not_import_torch():
    code = "import sys, worker.tasks, worker.supervise, worker.lifecycle, worker.recover, core.queue, cli.main; " \
           "assert 'torch' not in sys.modules, 'torch imported'"  # fmt: skip
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)


def test_graceful_worker_stop_requeues_and_resumes(service, workers):
    import signal

    settings, client = service()
    w = workers.start(settings, pool="threads", concurrency=2)
    job = client.submit(fake_spec(max_steps=80, behaviour={"step_s": 0.1}))  # ≥ 6 s left after step 12: still training
    wait_step_written(run_dir(settings, job["id"]), 12, 60)  # the trainer's record; the API's step lags it
    os.kill(w.pid, signal.SIGTERM)  # a deploy: warm shutdown of the worker process only
    w.wait(timeout=30)
    back = client.job(job["id"])
    assert back["status"] == "queued", back
    workers.start(settings, pool="threads")
    done = client.wait_terminal(job["id"], 90)
    assert done["status"] == "succeeded" and done["attempt"] == 2
    steps = [
        p["step"]
        for p in client.http.get(f"/jobs/{job['id']}/metrics", params={"name": "train/loss"}).json()["series"][0][
            "points"
        ]
    ]
    assert steps == list(range(1, 81))


def test_killed_worker_host_job_resumes_on_another(service, workers, tmp_path):
    import signal

    settings, client = service()
    w = workers.start(settings, extra_env={"RANKZERO_STALE_AFTER_S": "3"})
    job = client.submit(
        fake_spec(max_steps=80, max_restarts=1, behaviour={"step_s": 0.1})
    )  # still training past step 12
    wait_step_written(run_dir(settings, job["id"]), 12, 60)  # the trainer's record; the API's step lags it
    launched = job_pids(workers.marker, job["id"])
    # The host dies: the worker, torchrun and the ranks, all at once.
    workers.stop(w, signal.SIGKILL)
    for pid in launched:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    workers.start(settings, extra_env={"RANKZERO_STALE_AFTER_S": "3"})
    done = client.wait_terminal(job["id"], 90)
    assert done["status"] == "succeeded" and done["attempt"] == 2, done
    steps = [
        p["step"]
        for p in client.http.get(f"/jobs/{job['id']}/metrics", params={"name": "train/loss"}).json()["series"][0][
            "points"
        ]
    ]
    assert steps == list(range(1, 81))


def test_stalled_rank_is_failed_by_watchdog(service, workers, tmp_path):
    settings, client = service()
    workers.start(settings)
    job = client.submit(fake_spec(nproc=2, stall_timeout_s=10, behaviour={"hang_rank": 0, "hang_at_step": 3}))
    rank_pids = list(wait_ranks(workers.marker, job["id"], 2).values())  # as the host sees them
    done = client.wait_terminal(job["id"], 60)
    assert done["status"] == "failed" and "stall_timeout_s" in done["error"]
    assert not [p for p in rank_pids if _alive(p)] and not job_pids(workers.marker, job["id"])


@pytest.mark.redis
def test_job_outliving_redis_visibility_timeout_launches_once(service, workers, monkeypatch):
    import secrets

    import redis

    url = f"redis://127.0.0.1:6379/{8 + secrets.randbelow(8)}"
    try:
        redis.Redis.from_url(url).ping()
    except Exception as exc:
        pytest.fail(f"Redis on 127.0.0.1:6379 is not reachable (the suite needs it): {exc}")
    queue = f"rankzero-test-{secrets.token_hex(4)}"
    monkeypatch.setenv("RANKZERO_QUEUE", queue)
    monkeypatch.setenv("RANKZERO_VISIBILITY_TIMEOUT_S", "2")
    try:
        settings, client = service(broker_url=url)
        workers.start(
            settings,
            pool="threads",
            concurrency=2,
            extra_env={"RANKZERO_QUEUE": queue, "RANKZERO_VISIBILITY_TIMEOUT_S": "2"},
        )
        # ~18 s: several visibility timeouts, and still running when the second worker is up.
        job = client.submit(fake_spec(max_steps=150, behaviour={"step_s": 0.12}))
        wait_step_written(run_dir(settings, job["id"]), 30, 60)  # the trainer's record; the API's step lags it
        # A second worker: on start it restores messages unacked past the visibility timeout.
        workers.start(
            settings,
            pool="threads",
            concurrency=2,
            extra_env={"RANKZERO_QUEUE": queue, "RANKZERO_VISIBILITY_TIMEOUT_S": "2"},
        )
        done = client.wait_terminal(job["id"], 90)
        assert done["status"] == "succeeded" and done["attempt"] == 1
        run = Path(settings.resolved_runs_dir) / f"job_{job['id']}"
        started = [
            e for e in map(json.loads, (run / "events.jsonl").read_text().splitlines()) if e["type"] == "started"
        ]
        assert len(started) == 1
        logs = workers.log(0) + workers.log(1)
        assert logs.count("torchrun pid") == 1
        print("redeliveries seen:", logs.count("nothing to do"))
    finally:
        r = redis.Redis.from_url(url)
        keys = [k for k in r.keys("*") if queue.encode() in k or k.startswith(b"unacked")]
        if keys:
            r.delete(*keys)


def test_sigkilled_rank_fails_job_naming_rank_and_exit_code(service, workers, tmp_path):
    import signal

    settings, client = service()
    workers.start(settings)
    job = client.submit(fake_spec(nproc=2, max_steps=100000, behaviour={"step_s": 0.1}))
    client.wait(job["id"], lambda j: j["step"] >= 2, 60, "step 2")
    launched = job_pids(workers.marker, job["id"])
    rank1 = ranks(workers.marker, job["id"])[1]  # its pid as the host sees it (the sandbox has its own)
    os.kill(rank1, signal.SIGKILL)
    done = client.wait_terminal(job["id"], 60)
    assert done["status"] == "failed" and done["failed_rank"] == 1 and done["exit_code"] == -9, done
    assert "SIGKILL" in done["error"] or "Signal 9" in done["error"]
    assert not [p for p in launched if _alive(p)]
