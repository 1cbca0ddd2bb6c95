"""Faults 3 and 4: one rank SIGKILLed, one rank hung (SIGSTOP). Real torchrun and trainer ranks."""

from __future__ import annotations

import os
import signal

from tests.support.jobs import events, points, run_dir, slow_spec, wait, wait_step_written
from tests.support.procs import alive, job_processes, wait_ranks


def test_killed_rank_fails_job_naming_rank_and_exit_code(service, workers) -> None:
    settings, client = service()
    workers.start(settings)
    job = client.submit(slow_spec("rank-killed", max_steps=400, max_restarts=0))
    client.wait(job["id"], lambda j: j["step"] >= 3, 120, "step 3")
    ranks = wait_ranks(workers.marker, job["id"], 2)
    everyone = [p.pid for p in job_processes(workers.marker, job["id"])]

    os.kill(ranks[1], signal.SIGKILL)
    done = client.wait_terminal(job["id"], 60)  # torchrun must stop rank 0 itself; nobody else will
    assert done["status"] == "failed", done
    assert done["failed_rank"] == 1 and done["exit_code"] == -9, done
    assert "rank 1" in done["error"] and "-9" in done["error"], done["error"]
    wait(lambda: not [p for p in everyone if alive(p)], 10, "every process of the job to be gone")
    assert not job_processes(workers.marker, job["id"])


def test_hung_rank_is_restarted_by_the_stall_watchdog(service, workers) -> None:
    settings, client = service()
    workers.start(settings)
    # Slow steps: rank 1 must stop between checkpoints 10 and 20 (10 steps ≈ 3 s), whatever the load.
    job = client.submit(slow_spec("rank-hangs", step_s=0.3, max_steps=40, stall_timeout_s=10, max_restarts=1))
    # The trainer's own record of checkpoint 10 (the API's step follows the file about a second later).
    wait_step_written(run_dir(settings, job["id"]), 10, 120, "checkpoint")
    ranks = wait_ranks(workers.marker, job["id"], 2, attempt=1)
    everyone = [p.pid for p in job_processes(workers.marker, job["id"], attempt=1)]
    os.kill(ranks[1], signal.SIGSTOP)  # alive but making no progress; rank 0 blocks in its next all-reduce
    done = client.wait_terminal(job["id"], 150)
    assert done["status"] == "succeeded" and done["attempt"] == 2, done
    restart = [t for t in client.job(job["id"])["transitions"] if t["status"] == "queued" and t["attempt"] == 1]
    assert restart and "stall_timeout_s" in (restart[0]["detail"] or ""), client.job(job["id"])["transitions"]
    assert not [p for p in everyone if alive(p)], (
        "the hung attempt's processes must be gone (SIGKILL reaches a stopped one)"
    )
    assert points(client, job["id"]) == list(range(1, 41))
    assert [e["start_step"] for e in events(run_dir(settings, job["id"])) if e["type"] == "started"] == [0, 10]
