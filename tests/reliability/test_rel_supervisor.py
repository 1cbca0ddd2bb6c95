"""A supervisor (the worker process that watches one attempt) dies, freezes, or fails, while its
ranks train: issue 12 items 11, 12 and 16. Real Celery workers, torchrun and the real trainer.

- killed (SIGKILL of the worker process only; torchrun runs in its own session): its ranks get
  SIGTERM with it (PR_SET_PDEATHSIG), checkpoint and exit; the next attempt ingests what
  events.jsonl holds and resumes from that checkpoint, which is on disk but was never in the database.
- frozen (SIGSTOP) past the stale threshold and replaced: the new attempt stops the old ranks before
  it launches; the old supervisor, woken, finds its writes fenced by the attempt number and writes nothing.
- failing (an event it cannot ingest): it stops its ranks and the job fails saying why.
"""

from __future__ import annotations

import os
import signal
from typing import Any

from tests.support.jobs import events, points, run_dir, slow_spec, wait, wait_step_written
from tests.support.procs import alive, job_processes

STALE = {"RANKZERO_STALE_AFTER_S": "3"}  # recovery declares a silent worker dead after 3 s


def _assert_attempts_never_overlap(evs: list[dict[str, Any]]) -> None:
    """One writer at a time: seqs strictly increase, and every event before a `started` is older than it."""
    seqs = [e["seq"] for e in evs]
    assert seqs == sorted(set(seqs)), "two attempts wrote events.jsonl at once"
    for i, e in enumerate(evs):
        if e["type"] == "started" and i:
            assert max(x["time"] for x in evs[:i]) <= e["time"], "an earlier attempt wrote after a later one started"


def test_killed_worker_process_takes_its_ranks_and_the_job_resumes_from_disk(service, workers) -> None:
    settings, client = service()
    host = workers.start(settings, pool="threads", concurrency=1, extra_env=STALE)
    job = client.submit(slow_spec("supervisor-killed", step_s=0.2, max_restarts=1))  # still training well past step 12
    job_id = job["id"]
    # The trainer's own record (the API's step follows the file about a second later).
    wait_step_written(run_dir(settings, job_id), 10, 120, "checkpoint")
    wait_step_written(run_dir(settings, job_id), 12, 60)
    attempt1 = [p.pid for p in job_processes(workers.marker, job_id, attempt=1)]
    assert len(attempt1) >= 3, attempt1  # torchrun and two ranks

    workers.stop(host, signal.SIGKILL)  # the worker process alone: torchrun and the ranks are in their own session
    wait(lambda: not [p for p in attempt1 if alive(p)], 20, "attempt 1's ranks to die with their supervisor")
    stopped = [e for e in events(run_dir(settings, job_id)) if e["type"] == "stopped"]
    assert len(stopped) == 1, "the ranks checkpoint on their way out"
    stop_step = stopped[0]["step"]
    listed = {c["step"] for c in client.http.get(f"/jobs/{job_id}/checkpoints").json()}
    assert stop_step not in listed, "the test needs a checkpoint that is on disk only"

    workers.start(settings, pool="threads", concurrency=1, extra_env=STALE)
    done = client.wait_terminal(job_id, 150)
    assert done["status"] == "succeeded" and done["attempt"] == 2, done
    evs = events(run_dir(settings, job_id))
    assert [e["start_step"] for e in evs if e["type"] == "started"] == [0, stop_step], (
        "attempt 2 resumes from the newest intact checkpoint on disk"
    )
    _assert_attempts_never_overlap(evs)
    assert points(client, job_id) == list(range(1, 41))
    assert points(client, job_id, "lr") == list(range(1, 41))
    assert not job_processes(workers.marker, job_id)


def test_frozen_supervisor_that_was_replaced_writes_nothing(service, workers) -> None:
    settings, client = service()
    first = workers.start(settings, extra_env=STALE, name="first@%h")
    # Long enough that attempt 1 is still training when attempt 2 takes over (about 20 s later).
    job = client.submit(slow_spec("supervisor-frozen", max_steps=300, every=50, max_restarts=1))
    job_id = job["id"]
    wait_step_written(run_dir(settings, job_id), 12, 120)  # the trainer's record; the API's step lags it
    attempt1 = [p.pid for p in job_processes(workers.marker, job_id, attempt=1)]
    os.kill(first.pid, signal.SIGSTOP)  # frozen, not dead: its ranks train on
    try:
        workers.start(settings, extra_env=STALE, name="second@%h")
        client.wait(job_id, lambda j: j["attempt"] == 2 and j["status"] != "starting", 120, "attempt 2 launched")
        left = [p for p in attempt1 if alive(p)]
        assert not left, f"attempt 1's processes {left} still run beside attempt 2"
    finally:
        os.kill(first.pid, signal.SIGCONT)
    wait(lambda: "replaced by a later attempt" in workers.log(0), 60, "the woken supervisor to find itself fenced out")

    done = client.wait_terminal(job_id, 150)
    assert done["status"] == "succeeded" and done["attempt"] == 2 and done["step"] == 300, done
    moves = [t["status"] for t in client.job(job_id)["transitions"]]
    second_claim = len(moves) - 1 - moves[::-1].index("starting")
    assert moves[second_claim:] == ["starting", "running", "succeeded"], moves
    evs = events(run_dir(settings, job_id))
    last_start = max(i for i, e in enumerate(evs) if e["type"] == "started")
    assert any(e["type"] == "finished" for e in evs[last_start:]), "attempt 2 ran to its end"
    _assert_attempts_never_overlap(evs)
    assert points(client, job_id) == list(range(1, 301))
    assert not job_processes(workers.marker, job_id)


def test_an_ill_typed_event_never_ends_supervision_and_the_job_is_judged_by_its_record(service, workers) -> None:
    """Issue 19: an event the ingester cannot take (a checkpoint whose step is "ten", at seq 10⁹) is dropped,
    never written and never ends supervision (it used to crash the supervisor). The job runs to its end and
    is judged by its record: the forged seq left a hole, so it fails saying so, and every process is gone."""
    settings, client = service()
    workers.start(settings)
    spec = slow_spec("supervisor-fails", max_steps=400, max_restarts=0, step_s=0.05)
    spec["model"]["args"]["poison_at_step"] = 5  # rank 0 appends an event the ingester cannot take
    job_id = client.submit(spec)["id"]
    done = client.wait_terminal(job_id, 180)
    assert done["status"] == "failed", done
    assert "record is incomplete" in done["error"] and "supervisor failed" not in done["error"], done["error"]
    assert not client.http.get(f"/jobs/{job_id}/checkpoints").json() or all(
        c["path"].startswith("checkpoints/step_") for c in client.http.get(f"/jobs/{job_id}/checkpoints").json()
    )
    wait(lambda: not job_processes(workers.marker, job_id), 15, "every process of the job to be gone")
