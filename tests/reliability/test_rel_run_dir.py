"""Run-directory faults (issue 12 item 15): a job never succeeds with a hole in its record.
Real Celery worker, torchrun and the real trainer."""

from __future__ import annotations

import shutil

from tests.support.jobs import run_dir, slow_spec


def test_run_dir_deleted_mid_run_fails_the_job_saying_so(service, workers) -> None:
    settings, client = service()
    workers.start(settings)
    job = client.submit(slow_spec("run-dir-deleted", max_steps=30))
    client.wait(job["id"], lambda j: j["step"] >= 5, 120, "step 5")
    shutil.rmtree(run_dir(settings, job["id"]))  # the trainer's open events.jsonl now writes into the void
    done = client.wait_terminal(job["id"], 120)
    assert done["status"] == "failed", done
    assert "record is incomplete" in done["error"] and "events.jsonl" in done["error"], done["error"]
