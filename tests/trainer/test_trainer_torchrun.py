"""The real command line under torchrun (2 ranks, gloo): SIGTERM to the whole process group (as the
worker sends it) stops every rank at one agreed step with a checkpoint; a failure on rank 1 is named
in the `failed` event and in torchrun's error file (@record)."""

from __future__ import annotations

import os
import signal
import subprocess

from tests.support.trainer_runs import (
    REPO,
    child_env,
    load_checkpoint,
    make_spec,
    read_events,
    run,
    trainer_cmd,
    wait_for_event,
    write_spec,
)
from trainer.run_dir import RunDir


def test_sigterm_to_the_process_group_stops_all_ranks_at_one_step(tmp_path):
    spec = make_spec(
        nproc=2,
        max_steps=1_000_000,
        log_every=10,
        eval_every=None,
        checkpoint={"every_steps": None, "every_epochs": None},
    )
    run_dir = tmp_path / "run"
    cmd = trainer_cmd(write_spec(tmp_path / "s.json", spec), run_dir, nproc=2, log_dir=RunDir(run_dir).attempt_logs(0))
    proc = subprocess.Popen(
        cmd,
        cwd=REPO,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        wait_for_event(run_dir, lambda e: e["type"] == "progress", timeout=120, proc=proc)
        os.killpg(proc.pid, signal.SIGTERM)  # torchrun and both ranks, as the worker does
        out, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    events = read_events(run_dir)
    stopped = events[-1]
    assert stopped["type"] == "stopped", out[-4000:]
    ckpt = load_checkpoint(run_dir / stopped["checkpoint"])
    # Both ranks took part in the save at the same step (their RNG states were gathered into it).
    assert ckpt["step"] == stopped["step"] and len(ckpt["rng"]) == 2 and ckpt["world_size"] == 2
    # torchrun itself exits non-zero on SIGTERM; the ranks' own code (75) is what the worker keys on
    # through the `stopped` event.
    assert proc.returncode != 0


def test_failure_on_rank_1_is_reported_with_its_rank_and_traceback(tmp_path):
    spec = make_spec(nproc=2, max_steps=50, loss={"name": "rz_user_code:fail_on_rank_one"})
    run_dir = tmp_path / "run"
    layout = RunDir(run_dir)
    done = run(trainer_cmd(write_spec(tmp_path / "f.json", spec), run_dir, nproc=2, log_dir=layout.attempt_logs(0)))
    assert done.returncode not in (0, 75)
    failed = read_events(run_dir)[-1]
    assert failed["type"] == "failed", done.stdout[-4000:]
    assert failed["rank"] == 1 and "boom from rank 1" in failed["error"]
    assert "fail_on_rank_one" in failed["traceback"]
    error_files = layout.error_files(0)
    assert error_files, "torchrun's @record error file is missing"
    assert any("boom from rank 1" in p.read_text() for p in error_files)


def test_every_rank_keeps_its_own_progress_record(tmp_path):
    """Issue 38: each rank's `ranks/rank_N.json` (trainer/rank_progress.py) says its last step, that it is past
    its own work, and its medians (wall step time; own work: data + forward, marked by the built-in trainer)."""
    from trainer.rank_progress import read_all

    spec = make_spec(nproc=2, max_steps=12, eval_every=None, checkpoint={"every_steps": None, "every_epochs": None})
    run_dir = tmp_path / "run"
    layout = RunDir(run_dir)
    done = run(trainer_cmd(write_spec(tmp_path / "r.json", spec), run_dir, nproc=2, log_dir=layout.attempt_logs(0)),
               RANKZERO_ATTEMPT="1")  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:]
    records = read_all(layout.ranks, run_dir)
    assert sorted(records) == [0, 1], records
    for rank, record in records.items():
        assert record["rank"] == rank and record["step"] == 12 and record["attempt"] == 1, record
        assert record["phase"] == "wait" and record["progress_at"] > 0, record
        assert 0 < record["work_s"] < record["step_s"], record  # own work is a part of the step
