"""Issue 9 end to end: a tutorial-style DDP script with rankzero's three SDK lines
(tests/scripts/projects/sdk_tutorial), uploaded with the real CLI (`rankzero submit job.yaml --code DIR`,
a subprocess) against a live API, run by a real Celery worker under torchrun on 2 CPU ranks.

- its loss curve (one train/loss point per logged step) and its checkpoints (listed, downloadable,
  sha256 as listed) are in the API;
- its worker SIGKILLed mid-run (by pid): the recovery sweep of a new worker starts attempt 2, which
  resumes from `rankzero.load_checkpoint()` (its first step is the one after attempt 1's last
  checkpoint), and the job succeeds with every step on the curve.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.commands import RANKZERO, ROOT
from tests.support.deadlines import deadline_in
from tests.support.procs import alive, job_pids, kill_all

STEPS_PER_EPOCH = 8  # 256 samples, batch 16 per rank, 2 ranks
STALE = {"RANKZERO_STALE_AFTER_S": "3"}  # the recovery sweep declares a silent worker dead after 3 s


def _cli_submit(settings: Any, client: Any, tmp_path: Path, code: Path, spec: dict[str, Any]) -> int:
    """`rankzero submit job.yaml --code DIR` as a user runs it; the id of the job it queued."""
    job_yaml = tmp_path / "job.yaml"
    job_yaml.write_text(yaml.safe_dump(spec))
    env = {
        **os.environ,
        "RANKZERO_URL": str(client.http.base_url).removesuffix("/").removesuffix("/api"),
        "RANKZERO_API_TOKEN": settings.token(),
        "COLUMNS": "200",
        "XDG_CACHE_HOME": str(tmp_path / "cli-cache"),
    }
    done = subprocess.run(
        [RANKZERO, "submit", str(job_yaml), "--code", str(code)],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "compressed" in done.stdout and "sha256:" in done.stdout, done.stdout
    found = re.search(r"job (\d+) queued", done.stdout)
    assert found, done.stdout
    return int(found.group(1))


def _stdout(client: Any, job_id: int, attempt: int | None = None) -> str:
    params: dict[str, Any] = {"rank": 0, "stream": "stdout"}
    if attempt is not None:
        params["attempt"] = attempt
    r = client.http.get(f"/jobs/{job_id}/logs", params=params)
    r.raise_for_status()
    return r.json()["text"]


def _logged_steps(out: str) -> list[int]:
    """The steps rank 0 says it logged with rankzero.log, in order."""
    return [int(s) for s in re.findall(r"^step (\d+)$", out, re.M)]


def _loss_steps(client: Any, job_id: int) -> list[int]:
    r = client.http.get(f"/jobs/{job_id}/metrics", params={"name": "train/loss"})
    r.raise_for_status()
    (series,) = r.json()["series"]
    assert not series["downsampled"]
    return [p["step"] for p in series["points"]]


def _assert_checkpoints_download(client: Any, job_id: int) -> list[dict[str, Any]]:
    rows = client.http.get(f"/jobs/{job_id}/checkpoints").json()
    assert rows, "no checkpoint listed"
    for row in rows:
        got = client.http.get(f"/checkpoints/{row['id']}/download")
        assert got.status_code == 200, got.text
        assert len(got.content) == row["bytes"] and hashlib.sha256(got.content).hexdigest() == row["sha256"]
    return rows


def test_sdk_script_from_the_cli_shows_its_loss_curve_and_checkpoints(
    service, workers, project, tmp_path: Path
) -> None:
    settings, client = service()
    workers.start(settings)
    epochs = 2
    job_id = _cli_submit(settings, client, tmp_path, project("sdk_tutorial"),
                         {"name": "sdk-e2e", "entrypoint": f"train.py --epochs {epochs}", "nproc": 2,
                          "device": "cpu"})  # fmt: skip
    done = client.wait_terminal(job_id, timeout=240)
    assert done["status"] == "succeeded" and done["attempt"] == 1, done
    assert done["strategy"] == "script × 2" and done["spec"]["code"].startswith("sha256:")

    out = _stdout(client, job_id)
    total = epochs * STEPS_PER_EPOCH
    assert "attempt 1 starts at epoch 0 after step 0" in out
    assert "epoch 1 loss" in out and f"checkpoint loaded back after {epochs} epochs" in out  # the rank-0 torch.save
    logged = _logged_steps(out)
    assert logged == list(range(1, total + 1)), out
    assert _loss_steps(client, job_id) == logged  # one point per logged step
    assert done["latest_loss"] is not None

    rows = _assert_checkpoints_download(client, job_id)
    assert sorted((r["step"], r["epoch"]) for r in rows) == [(STEPS_PER_EPOCH * (e + 1), e) for e in range(epochs)]


def _wait_mid_run(client: Any, job_id: int, step: int) -> None:
    """Until an epoch's checkpoint is listed and rank 0 logged `step` (mid-way through the next epoch)."""
    deadline = deadline_in(180)
    while not (
        client.http.get(f"/jobs/{job_id}/checkpoints").json() and step in _logged_steps(_stdout(client, job_id))
    ):
        assert time.monotonic() < deadline, f"not at step {step} in 180 s: {client.job(job_id)}"
        time.sleep(0.2)


@pytest.mark.parametrize("dies", ["worker", "host", "drain"])
def test_worker_killed_mid_run_the_script_resumes_from_load_checkpoint(
    service, workers, project, tmp_path: Path, dies: str
) -> None:
    """worker: only the Celery worker is SIGKILLed; torchrun gets SIGTERM (PR_SET_PDEATHSIG), the ranks'
    should_stop() turns True, the script saves where it is and exits 75: attempt 2 retrains nothing.
    host: the worker, torchrun and both ranks are SIGKILLed: attempt 2 resumes from the last epoch's
    checkpoint and retrains the steps after it (each stays one point on the curve).
    drain: the worker gets SIGTERM (a deploy): it stops the ranks with SIGTERM, the script saves and
    exits 75 (rankzero.EXIT_STOPPED), and the job goes back to the queue before the worker exits."""
    settings, client = service()
    first = workers.start(settings, extra_env=STALE)
    epochs = 4
    total = epochs * STEPS_PER_EPOCH
    job_id = _cli_submit(settings, client, tmp_path, project("sdk_tutorial"),
                         {"name": f"sdk-{dies}-dies", "entrypoint": f"train.py --epochs {epochs} --sleep 0.3",
                          "nproc": 2, "device": "cpu", "max_restarts": 1})  # fmt: skip
    _wait_mid_run(client, job_id, STEPS_PER_EPOCH + 3)
    attempt1 = job_pids(workers.marker, job_id)
    assert len(attempt1) >= 3, "torchrun and its two ranks are not running"

    os.kill(first.pid, signal.SIGTERM if dies == "drain" else signal.SIGKILL)  # the worker process, by its pid
    if dies == "host":
        kill_all(attempt1)  # torchrun and the ranks, by their pids
    first.wait(timeout=30)
    if dies == "drain":
        back = client.job(job_id)
        assert back["status"] == "queued", back  # handed back before the worker exited
        assert "worker shutting down" in back["transitions"][-1]["detail"], back["transitions"]
    workers.start(settings, extra_env=STALE)  # a worker comes back; its recovery sweep finds the job

    done = client.wait_terminal(job_id, timeout=300)
    assert done["status"] == "succeeded" and done["attempt"] == 2, done
    assert not [p for p in attempt1 if alive(p)], "attempt 1's processes outlived the job"

    out1, out2 = _stdout(client, job_id, attempt=1), _stdout(client, job_id, attempt=2)
    a1, a2 = _logged_steps(out1), _logged_steps(out2)
    resumed = re.search(r"^attempt 2 starts at epoch \d+ after step (\d+)$", out2, re.M)
    assert resumed, out2
    start = int(resumed.group(1))  # the step of the checkpoint load_checkpoint() returned
    assert a1 == list(range(1, len(a1) + 1)) and a2 == list(range(start + 1, total + 1)), (out1, out2)
    assert start >= STEPS_PER_EPOCH, (start, a1)  # > 0: resumed, not started over
    if dies in ("worker", "drain"):
        assert start == a1[-1], f"attempt 1 stopped after step {a1[-1]} but attempt 2 resumed after step {start}"
    else:
        assert start == a1[-1] // STEPS_PER_EPOCH * STEPS_PER_EPOCH, (start, a1[-1])  # the last epoch's end
        assert sorted(set(a1) & set(a2)) == list(range(start + 1, a1[-1] + 1))  # retrained: only past it
    assert _loss_steps(client, job_id) == list(range(1, total + 1))  # every step once, none lost
    assert f"checkpoint loaded back after {epochs} epochs" in out2

    rows = _assert_checkpoints_download(client, job_id)
    assert max(r["step"] for r in rows) == total
    assert not job_pids(workers.marker, job_id)
