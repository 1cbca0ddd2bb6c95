"""Script jobs end to end: a folder uploaded as a bundle, a spec with `entrypoint`, a real Celery worker,
torchrun running the user's script (tests/scripts/projects/*) on CPU ranks."""

from __future__ import annotations

import time

from tests.scripts.conftest import script_spec
from tests.support.deadlines import deadline_in
from tests.support.procs import alive, job_pids


def _log(client, job_id: int, rank: int, stream: str) -> str:
    r = client.http.get(f"/jobs/{job_id}/logs", params={"rank": rank, "stream": stream})
    r.raise_for_status()
    return r.json()["text"]


def test_tutorial_ddp_script_runs_as_is_on_two_ranks(service, workers, project, upload) -> None:
    settings, client = service()
    workers.start(settings)
    code = upload(client, project("tutorial"))
    job = client.submit(script_spec("tutorial", code, "train.py --epochs 2", nproc=2))
    assert job["strategy"] == "script × 2"
    done = client.wait_terminal(job["id"], timeout=180)
    assert done["status"] == "succeeded", done
    assert done["exit_code"] == 0 and done["finished_at"] and done["started_at"]
    out = _log(client, job["id"], 0, "stdout")
    assert "epoch 0 loss" in out and "epoch 1 loss" in out and "checkpoint loaded back after 2 epochs" in out
    # The rank-0 torch.save to the current folder landed in the run dir, next to links to the bundle.
    work = settings.resolved_runs_dir / f"job_{job['id']}" / "work"
    assert (work / "checkpoint.pt").is_file() and (work / "train.py").is_symlink()


def test_failing_rank_is_named_with_exit_code_and_traceback(service, workers, project, upload) -> None:
    settings, client = service()
    workers.start(settings)
    code = upload(client, project("failing"))
    job = client.submit(script_spec("failing", code, "train.py", nproc=2))
    done = client.wait_terminal(job["id"], timeout=180)
    assert done["status"] == "failed", done
    assert done["failed_rank"] == 1 and done["exit_code"] == 3, done
    error = done["error"]
    assert error.startswith("rank 1 failed with exit code 3: ValueError: bad batch on rank 1"), error
    assert "Traceback (most recent call last):" in error and "in load_batch" in error


def test_cancel_stops_a_script_job_leaving_no_process(service, workers, project, upload) -> None:
    settings, client = service(cancel_grace_s=3.0)
    workers.start(settings)
    code = upload(client, project("sleeper"))
    job = client.submit(script_spec("sleeper", code, "train.py", nproc=2))
    client.wait(job["id"], lambda j: j["status"] == "running", 120, "running")
    deadline = deadline_in(120)
    while "step 3" not in _log(client, job["id"], 1, "stdout"):
        assert time.monotonic() < deadline, "rank 1 printed nothing"
        time.sleep(0.3)
    launched = job_pids(workers.marker, job["id"])
    assert len(launched) >= 3  # torchrun and two ranks
    client.http.post(f"/jobs/{job['id']}/cancel").raise_for_status()
    done = client.wait_terminal(job["id"], timeout=30)
    assert done["status"] == "cancelled", done
    assert not [p for p in launched if alive(p)] and not job_pids(workers.marker, job["id"])


def test_tensorboard_scalars_appear_as_metrics(service, workers, project, upload) -> None:
    settings, client = service()
    workers.start(settings)
    code = upload(client, project("tensorboard"))
    job = client.submit(script_spec("tb", code, "train.py"))
    done = client.wait_terminal(job["id"], timeout=180)
    assert done["status"] == "succeeded", done
    series = {s["name"]: s for s in client.http.get(f"/jobs/{job['id']}/metrics").json()["series"]}
    # The script's scalars, beside the worker's own system samples (sys/...).
    assert {n for n in series if not n.startswith("sys/")} == {"train/loss", "lr"}, set(series)
    loss = series["train/loss"]["points"]
    assert [p["step"] for p in loss] == list(range(1, 9))
    assert loss[-1]["value"] < loss[0]["value"]
    assert done["latest_loss"] == loss[-1]["value"]
    assert done["step"] == 8, done  # no rankzero.progress: the step is TensorBoard's, not 0
    assert done["epoch"] is None and done["samples"] is None, done  # nobody reported them: null, never 0
    # System samples, one point per heartbeat (1 s here) for the whole job, keyed by wall-clock ms (not step 0).
    rss = series["sys/rss_mb_total"]["points"]
    keys = [p["step"] for p in rss]
    assert len(keys) >= 2 and keys == sorted(set(keys)), keys
    assert all(b - a >= 900 for a, b in zip(keys, keys[1:], strict=False)), keys
    assert abs(keys[-1] / 1000 - time.time()) < 600, keys


def test_a_failed_script_restarts_as_a_new_attempt_in_the_same_folder(service, workers, project, upload) -> None:
    settings, client = service()
    workers.start(settings)
    code = upload(client, project("flaky"))
    job = client.submit(script_spec("flaky", code, "train.py", max_restarts=1))
    done = client.wait_terminal(job["id"], timeout=180)
    assert done["status"] == "succeeded" and done["attempt"] == 2, done
    assert "attempt 2 read: written by attempt 1" in _log(client, job["id"], 0, "stdout")


def test_a_silent_script_is_stopped_by_the_stall_watchdog(service, workers, project, upload) -> None:
    settings, client = service(cancel_grace_s=2.0)
    workers.start(settings)
    code = upload(client, project("hang"))
    job = client.submit(script_spec("hang", code, "train.py", stall_timeout_s=10))
    done = client.wait_terminal(job["id"], timeout=120)  # armed by its first output, not after 600 s
    assert done["status"] == "failed" and "stall_timeout_s" in done["error"], done
    assert not job_pids(workers.marker, job["id"])


def test_a_script_cannot_forge_its_success_or_list_foreign_files_as_checkpoints(
    service, workers, project, upload
) -> None:
    """Truth from the worker, not from the job: exit 3 after a forged `finished` event is a failure; checkpoint
    rows only ever name files inside the job's own checkpoints/ folder; ill-typed values end nothing."""
    settings, client = service()
    workers.start(settings)
    code = upload(client, project("forged_finish"))
    job = client.submit(script_spec("forged", code, "train.py", nproc=1, max_restarts=0))
    done = client.wait_terminal(job["id"], timeout=150)
    assert done["status"] == "failed", done
    assert done["exit_code"] == 3
    rows = client.http.get(f"/jobs/{job['id']}/checkpoints").json()
    assert rows == [], rows
