"""The SDK in a user's own DDP script under real torchrun (2 ranks, gloo, CPU): metrics are the mean
across ranks, progress and checkpoints are recorded the way the service reads them, a restart
resumes from `load_checkpoint()`, SIGTERM stops both ranks on one step with exit 75, and the script
runs unchanged outside the service."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from rankzero import env as rz_env
from tests.support.deadlines import deadline_in
from tests.support.trainer_runs import REPO, child_env, read_events, run, torchrun_cmd
from trainer.exit_codes import EXIT_OK, EXIT_STOPPED

SCRIPT = str(Path(__file__).with_name("sdk_script.py"))
BATCH, WORLD = 8, 2


def _launch(results: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    results.mkdir(parents=True, exist_ok=True)
    done = run(torchrun_cmd(WORLD, SCRIPT, str(results), *args), **env)
    assert done.returncode == 0, done.stdout[-4000:]
    return done


def _ranks(results: Path) -> list[dict[str, Any]]:
    return [json.loads((results / f"rank_{r}.json").read_text()) for r in range(WORLD)]


def _metrics(events: list[dict[str, Any]], name: str) -> dict[int, float]:
    return {e["step"]: e["value"] for e in events if e["type"] == "metric" and e["name"] == name}


@pytest.fixture(scope="module")
def restarted(tmp_path_factory) -> dict[str, Any]:
    """Attempt 1 trains steps 1..6 (saving at 3 and 6); attempt 2, a restart, resumes to step 10."""
    tmp = tmp_path_factory.mktemp("sdk")
    run_dir = tmp / "run"
    job = {rz_env.RUN_DIR: str(run_dir), rz_env.JOB_ID: "7", rz_env.KEEP_LAST: "2"}
    _launch(tmp / "a1", "--steps", "6", "--save-every", "3", **job, **{rz_env.ATTEMPT: "1"})
    first_events = read_events(run_dir)
    _launch(tmp / "a2", "--steps", "10", "--save-every", "3", **job, **{rz_env.ATTEMPT: "2"})
    return {
        "run_dir": run_dir,
        "first_events": first_events,
        "events": read_events(run_dir),
        "a1": _ranks(tmp / "a1"),
        "a2": _ranks(tmp / "a2"),
    }


def test_logged_tensors_are_the_mean_across_ranks_and_numbers_are_rank_0s(restarted):
    events = restarted["events"]
    losses = {}
    for attempt in ("a1", "a2"):
        for step in restarted[attempt][0]["losses"]:
            losses[int(step)] = [r["losses"][step] for r in restarted[attempt]]
    assert sorted(losses) == list(range(1, 11))
    logged = _metrics(events, "train/loss")
    assert sorted(logged) == list(range(1, 11))
    for step, per_rank in losses.items():
        assert per_rank[0] != per_rank[1]  # each rank saw its own data
        assert logged[step] == pytest.approx(sum(per_rank) / WORLD, rel=1e-12, abs=0)
    assert _metrics(events, "rank_plus_step") == {s: s + 0.5 for s in range(1, 11)}  # mean of s+0, s+1
    assert _metrics(events, "lr") == dict.fromkeys(range(1, 11), 0.1)
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(set(seqs)) and seqs[0] == 1  # strictly increasing across both attempts
    assert all(isinstance(e["time"], float) for e in events)


def test_progress_events_carry_step_total_samples_and_rates(restarted):
    progress = [e for e in restarted["first_events"] if e["type"] == "progress"]
    assert progress[0]["step"] == 1 and progress[-1]["step"] == 6
    steps = [p["step"] for p in progress]
    assert steps == sorted(steps)
    last = progress[-1]
    assert last["total_steps"] == 6 and last["samples"] == 6 * BATCH * WORLD
    assert last["eta_s"] == 0 and last["samples_per_s"] > 0
    final = [e for e in restarted["events"] if e["type"] == "progress"][-1]
    assert final["step"] == final["total_steps"] == 10


def test_checkpoints_are_recorded_pruned_and_loaded_after_a_restart(restarted):
    run_dir, events = restarted["run_dir"], restarted["events"]
    saved = [e for e in events if e["type"] == "checkpoint"]
    assert [e["step"] for e in saved] == [3, 6, 9]
    on_disk = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert on_disk == ["step_00000006.pt", "step_00000009.pt"]  # RANKZERO_KEEP_LAST=2
    for e in saved[1:]:
        data = (run_dir / e["path"]).read_bytes()
        assert e["bytes"] == len(data) and e["sha256"] == hashlib.sha256(data).hexdigest() and e["epoch"] == 0
    # The restart found step 6 on every rank and loaded exactly what was saved.
    step6 = torch.load(run_dir / "checkpoints/step_00000006.pt", map_location="cpu", weights_only=True)
    for rank in restarted["a2"]:
        assert rank["resumed_from"] == 6 and rank["exit"] == EXIT_OK
        assert rank["resumed_weight"] == step6["model"]["weight"].tolist()
        assert sorted(map(int, rank["losses"])) == list(range(7, 11))
    assert all(r["resumed_from"] is None for r in restarted["a1"])


def test_the_worker_ingester_accepts_the_events(restarted, sqlite_url):
    from sqlalchemy import select
    from sqlmodel import Session

    from core.db import get_engine
    from core.migrate import upgrade
    from core.tables import Checkpoint, Job, JobStatus, MetricPoint
    from worker.ingest import Ingestor
    from worker.ingest_events import EventTail

    upgrade(sqlite_url)
    engine = get_engine(sqlite_url)
    with Session(engine) as s:
        job = Job(name="sdk", spec={}, status=JobStatus.running, attempt=2)
        s.add(job)
        s.commit()
        job_id = job.id
    run_dir = restarted["run_dir"]
    ingestor = Ingestor(engine, job_id, run_dir)
    ingestor.ingest(EventTail(run_dir / "events.jsonl").read())
    with Session(engine) as s:
        points = s.execute(
            select(MetricPoint.name, MetricPoint.step, MetricPoint.value).where(MetricPoint.job_id == job_id)
        )
        stored = {(name, step): value for name, step, value in points}
        job = s.get(Job, job_id)
        ckpts = sorted(s.execute(select(Checkpoint.path).where(Checkpoint.job_id == job_id)).scalars())
    events = restarted["events"]
    assert stored == {(e["name"], e["step"]): e["value"] for e in events if e["type"] == "metric"}
    assert job.step == 10 and job.total_steps == 10 and job.samples == 10 * BATCH * WORLD
    assert job.latest_loss == _metrics(events, "train/loss")[10]
    assert ckpts == ["checkpoints/step_00000006.pt", "checkpoints/step_00000009.pt"]  # pruned ones forgotten
    assert ingestor.seen.last_event_seq == events[-1]["seq"]


def test_metrics_held_back_are_written_at_exit_without_a_teardown(tmp_path):
    """`log` averages blocks of steps in one all-reduce; a script that exits without
    destroy_process_group() still gets its last block written (flushed at exit)."""
    run_dir = tmp_path / "run"
    _launch(tmp_path / "res", "--steps", "7", "--no-teardown", **{rz_env.RUN_DIR: str(run_dir)})
    ranks = _ranks(tmp_path / "res")
    logged = _metrics(read_events(run_dir), "train/loss")
    assert sorted(logged) == list(range(1, 8))
    assert logged[7] == pytest.approx((ranks[0]["losses"]["7"] + ranks[1]["losses"]["7"]) / 2, rel=1e-12)


def _wait_for(predicate, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = deadline_in(timeout)
    while time.monotonic() < deadline:
        if predicate():
            return
        assert proc.poll() is None, f"exited with {proc.returncode}: {proc.stdout.read()[-4000:]}"
        time.sleep(0.2)
    raise AssertionError("timed out waiting for the script to get going")


def _pid_of(results: Path, rank: int) -> int | None:
    try:
        return json.loads((results / f"rank_{rank}.json").read_text())["pid"]
    except (OSError, ValueError):
        return None


@pytest.mark.parametrize("target", ["torchrun", "rank 1 only"])
def test_sigterm_stops_both_ranks_on_the_same_step_with_exit_75(tmp_path, target):
    """SIGTERM to torchrun (as the worker sends it; torchrun passes it on to every rank), or to one
    rank only: either way every rank's should_stop() turns True on the same step, the step's
    checkpoint is saved and the ranks exit 75."""
    run_dir, results = tmp_path / "run", tmp_path / "res"
    results.mkdir()
    cmd = torchrun_cmd(WORLD, SCRIPT, str(results), "--steps", "1000000", "--sleep", "0.02")
    proc = subprocess.Popen(
        cmd,
        cwd=REPO,
        env=child_env(**{rz_env.RUN_DIR: str(run_dir)}),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        _wait_for(lambda: _pid_of(results, 1) and len(_metrics(read_events(run_dir), "train/loss")) >= 5, proc)
        if target == "torchrun":
            os.killpg(proc.pid, signal.SIGTERM)
        else:
            os.kill(_pid_of(results, 1), signal.SIGTERM)
        out, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    ranks = _ranks(results)
    assert [r["exit"] for r in ranks] == [EXIT_STOPPED, EXIT_STOPPED], out[-4000:]
    stopped_at = ranks[0]["stopped_at"]
    assert stopped_at is not None and ranks[1]["stopped_at"] == stopped_at
    saved = [e for e in read_events(run_dir) if e["type"] == "checkpoint"]
    assert saved[-1]["step"] == stopped_at and (run_dir / saved[-1]["path"]).is_file()
    if target == "rank 1 only":
        # torchrun reports the ranks' exit codes: 75, or -15 for a rank it SIGTERMed itself on seeing
        # the other's 75 while that rank was already exiting (its handler gone with the interpreter).
        codes = {int(c) for c in re.findall(r"exitcode\s*:\s*(-?\d+)", out)}
        assert EXIT_STOPPED in codes and codes <= {EXIT_STOPPED, -signal.SIGTERM}, out[-4000:]


def test_outside_the_service_the_script_runs_and_writes_nothing(tmp_path):
    """No RANKZERO_RUN_DIR (a script run by hand): 2 ranks under torchrun and one plain process both
    finish; nothing is written next to the script's own results, and load_checkpoint gave None."""
    work = tmp_path / "work"
    work.mkdir()
    environ = child_env()
    for name in rz_env.NAMES:
        environ.pop(name, None)
    for nproc, results in ((WORLD, tmp_path / "res2"), (1, tmp_path / "res1")):
        results.mkdir()
        args = [SCRIPT, str(results), "--steps", "4", "--save-every", "2"]
        cmd = torchrun_cmd(nproc, *args) if nproc > 1 else [sys.executable, *args]
        done = subprocess.run(cmd, cwd=work, env=environ, capture_output=True, text=True, timeout=150)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert done.stderr.count("RANKZERO_RUN_DIR is not set") == 1  # said once, by rank 0
        for r in range(nproc):
            seen = json.loads((results / f"rank_{r}.json").read_text())
            assert seen["resumed_from"] is None and seen["exit"] == EXIT_OK and len(seen["losses"]) == 4
    assert list(work.iterdir()) == []  # no events.jsonl, no checkpoints, no ./rankzero_checkpoints


def test_importing_the_package_or_its_env_names_imports_no_torch():
    """The worker builds the ranks' environment from rankzero.env and must stay torch-free."""
    code = "import sys, rankzero, rankzero.env; assert 'torch' not in sys.modules, 'torch imported'; print('ok')"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=child_env(), capture_output=True, text=True)
    assert done.stdout.strip() == "ok", done.stderr
