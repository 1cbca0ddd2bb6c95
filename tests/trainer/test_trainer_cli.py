"""`python -m trainer` end to end (one process): events contract, checkpoints, exact resume with seq
continuing, SIGTERM → checkpoint + exit 75, non-finite loss, user code."""

from __future__ import annotations

import hashlib
import json
import math
import os
import signal
import subprocess

import pytest
import torch
import yaml

from tests.support.trainer_runs import (
    PYTHON,
    REPO,
    child_env,
    load_checkpoint,
    make_spec,
    metric_series,
    read_events,
    run,
    trainer_cmd,
    wait_for_event,
    write_spec,
)

# docs/ARCHITECTURE.md: the exact fields of each event type (besides seq, time, type)
EVENT_FIELDS = {
    "started": {
        "world_size",
        "nproc",
        "nnodes",
        "strategy",
        "device",
        "backend",
        "precision",
        "total_steps",
        "global_batch_size",
        "start_step",
        "resumed_from",
    },
    "progress": {"step", "total_steps", "epoch", "samples", "samples_per_s", "eta_s"},
    "metric": {"step", "name", "value"},
    "checkpoint": {"step", "epoch", "path", "bytes", "sha256"},
    "stopped": {"step", "checkpoint", "reason"},
    "finished": {"step"},
    "failed": {"error", "rank", "traceback"},
}


# trainer/event_types.py: optional keys the built-in trainer adds (start-up stamps, issue 13)
OPTIONAL_FIELDS = {"started": {"startup"}, "progress": {"first_step_s"}}


def assert_event_contract(events):
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(1, len(events) + 1)), "seq must start at 1 and increase by 1"
    times = [e["time"] for e in events]
    assert times == sorted(times)
    for e in events:
        fields = set(e) - {"seq", "time", "type"}
        assert EVENT_FIELDS[e["type"]] <= fields <= EVENT_FIELDS[e["type"]] | OPTIONAL_FIELDS.get(e["type"], set()), e


def test_run_writes_spec_events_and_checkpoints(tmp_path):
    """A YAML spec, 2 epochs of digits: spec.json, events per contract, keep_last, final checkpoint."""
    spec = {
        "name": "cli",
        "data": {"name": "digits"},
        "model": {"name": "mlp", "args": {"hidden": 32}},
        "batch_size": 64,
        "epochs": 2,
        "log_every": 5,
        "device": "cpu",
        "optimizer": {"name": "sgd", "lr": 0.2, "momentum": 0.9},
        "scheduler": {"name": "step", "step_size": 10, "gamma": 0.5},
        "checkpoint": {"every_steps": 4, "every_epochs": 1, "keep_last": 2},
    }
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    run_dir = tmp_path / "run"
    done = run(trainer_cmd(spec_path, run_dir))
    assert done.returncode == 0, done.stdout[-4000:]

    written = json.loads((run_dir / "spec.json").read_text())
    assert written["name"] == "cli" and written["accumulation_steps"] == 1  # defaults filled in
    events = read_events(run_dir)
    assert_event_contract(events)
    started, finished = events[0], events[-1]
    steps_per_epoch = 1617 // 64  # 1797 digits, 10% held out
    assert started["type"] == "started" and started["total_steps"] == 2 * steps_per_epoch == 50
    assert started["global_batch_size"] == 64 and started["strategy"] == "single" and started["backend"] == "none"
    assert finished == {**finished, "type": "finished", "step": 50}
    progress = [e for e in events if e["type"] == "progress"]
    assert [p["step"] for p in progress] == list(range(5, 51, 5))
    printed = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("step ")]
    assert printed == [f"{s}/50" for s in range(5, 51, 5)]  # one progress line per log interval
    assert progress[-1]["eta_s"] == 0 and progress[-1]["samples"] == 50 * 64 and progress[-1]["epoch"] == 2
    lr = metric_series(events, "lr")
    assert lr[5] == pytest.approx(0.2) and lr[25] == pytest.approx(0.05)  # step schedule halves every 10 steps
    loss = metric_series(events, "train/loss")
    assert loss[50] < loss[5]
    val = metric_series(events, "val/accuracy")
    assert sorted(val) == [25, 50] and val[50] > 0.8  # validation at each epoch end by default

    ckpt_events = [e for e in events if e["type"] == "checkpoint"]
    assert [e["step"] for e in ckpt_events] == [4, 8, 12, 16, 20, 24, 25, 28, 32, 36, 40, 44, 48, 50]
    kept = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert kept == ["step_00000048.pt", "step_00000050.pt"]  # keep_last 2, final always; no temp files left
    last = ckpt_events[-1]
    blob = (run_dir / last["path"]).read_bytes()
    assert last["bytes"] == len(blob) and last["sha256"] == hashlib.sha256(blob).hexdigest()
    ckpt = load_checkpoint(run_dir / last["path"])  # weights_only=True
    assert set(ckpt) >= {"model", "optimizer", "scheduler", "scaler", "step", "epoch", "rng"}
    assert ckpt["step"] == 50 and ckpt["epoch"] == 2 and isinstance(ckpt["rng"][0]["cpu"], torch.Tensor)


def test_resume_mid_epoch_is_exact_and_seq_continues(tmp_path):
    """Straight 20 steps vs 7 steps + resume into the same run dir: identical weights, seq continues."""
    spec = make_spec(
        max_steps=20,
        log_every=5,
        checkpoint={"every_steps": 7},
        model={"args": {"in_features": 16, "hidden": 32, "num_classes": 4, "dropout": 0.2}},
    )
    run_dir = tmp_path / "run"
    done = run(trainer_cmd(write_spec(tmp_path / "a.json", spec), run_dir))
    assert done.returncode == 0, done.stdout[-4000:]
    straight = load_checkpoint(run_dir / "checkpoints" / "step_00000020.pt")["model"]
    first_events = read_events(run_dir)

    resume = {**spec, "resume_from": str(run_dir / "checkpoints" / "step_00000007.pt")}
    done = run(trainer_cmd(write_spec(tmp_path / "b.json", resume), run_dir))
    assert done.returncode == 0, done.stdout[-4000:]
    resumed = load_checkpoint(run_dir / "checkpoints" / "step_00000020.pt")["model"]
    for k in straight:  # same process count, same RNG (dropout) restored: bit-identical
        assert torch.equal(straight[k], resumed[k]), k

    events = read_events(run_dir)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    appended = events[len(first_events) :]
    assert appended[0]["type"] == "started" and appended[0]["start_step"] == 7
    assert appended[0]["resumed_from"].endswith("step_00000007.pt") and appended[-1]["type"] == "finished"
    assert min(e["step"] for e in appended if e["type"] == "metric") == 10


def test_sigterm_saves_a_checkpoint_and_exits_75(tmp_path):
    spec = make_spec(
        max_steps=1_000_000, log_every=10, eval_every=None, checkpoint={"every_steps": None, "every_epochs": None}
    )
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        trainer_cmd(write_spec(tmp_path / "s.json", spec), run_dir),
        cwd=REPO,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_for_event(run_dir, lambda e: e["type"] == "progress", proc=proc)
        os.killpg(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 75, out[-3000:]
    events = read_events(run_dir)
    stopped = events[-1]
    assert stopped["type"] == "stopped" and stopped["reason"] == "SIGTERM"
    ckpt = load_checkpoint(run_dir / stopped["checkpoint"])
    assert ckpt["step"] == stopped["step"] > 0
    assert [e for e in events if e["type"] == "checkpoint"][-1]["step"] == stopped["step"]


def test_non_finite_loss_fails_fast_naming_step_and_rank(tmp_path):
    spec = make_spec(max_steps=1000, loss={"name": "rz_user_code:nan_after_three"}, log_every=1000, eval_every=None)
    run_dir = tmp_path / "run"
    done = run(trainer_cmd(write_spec(tmp_path / "n.json", spec), run_dir))
    assert done.returncode not in (0, 75)
    failed = read_events(run_dir)[-1]
    assert failed["type"] == "failed" and failed["rank"] == 0
    assert "optimizer step 4 on rank 0" in failed["error"] and "NonFiniteLoss" in failed["error"]
    assert "Traceback" in failed["traceback"] or "NonFiniteLoss" in failed["traceback"]
    assert not (run_dir / "checkpoints").exists()  # failed within a few steps, long before any checkpoint


def test_user_model_data_and_loss(tmp_path):
    """User code by 'module:function': a model factory, a (train, val) factory, a loss fn; and a model
    that scores itself with loss null."""
    common = dict(
        data={"name": "rz_user_code:make_data", "args": {}},
        max_steps=12,
        eval_every=6,
        log_every=3,
        checkpoint={"every_steps": None, "every_epochs": None},
    )
    a = make_spec(
        model={"name": "rz_user_code:make_model", "args": {"features": 8}},
        loss={"name": "rz_user_code:loss_fn"},
        **common,
    )
    b = make_spec(model={"name": "rz_user_code:make_self_scoring", "args": {}}, loss=None, **common)
    for name, spec in (("a", a), ("b", b)):
        done = run(trainer_cmd(write_spec(tmp_path / f"{name}.json", spec), tmp_path / name))
        assert done.returncode == 0, done.stdout[-4000:]
        events = read_events(tmp_path / name)
        assert events[-1]["type"] == "finished"
        assert sorted(metric_series(events, "val/loss")) == [6, 12]
        assert metric_series(events, "val/accuracy") == {}  # a user loss has no notion of accuracy
        assert metric_series(events, "train/loss")[12] < metric_series(events, "train/loss")[3] * 1.5


def test_a_bad_spec_is_refused_with_the_field_named(tmp_path):
    bad = make_spec(batch_size=0, surprise=1)
    done = run(
        [
            PYTHON,
            "-m",
            "trainer",
            "--spec",
            str(write_spec(tmp_path / "bad.json", bad)),
            "--run-dir",
            str(tmp_path / "r"),
        ]
    )
    assert done.returncode != 0
    assert "batch_size" in done.stdout and "surprise" in done.stdout
    failed = read_events(tmp_path / "r")[-1]
    assert failed["type"] == "failed" and failed["rank"] == 0 and "batch_size" in failed["error"]


def test_convnet_with_batchnorm_in_bf16_autocast_on_cpu(tmp_path):
    spec = make_spec(
        model={"name": "convnet", "args": {"in_channels": 1, "num_classes": 10}},
        data={"name": "digits", "args": {"image": True}, "val_fraction": 0.1},
        batch_size=32,
        max_steps=12,
        log_every=4,
        eval_every=12,
        precision="bf16",
        optimizer={"name": "adamw", "lr": 0.003},
        grad_clip_norm=5.0,
    )
    done = run(trainer_cmd(write_spec(tmp_path / "c.json", spec), tmp_path / "run"))
    assert done.returncode == 0, done.stdout[-4000:]
    events = read_events(tmp_path / "run")
    assert events[0]["precision"] == "bf16" and events[-1]["type"] == "finished"
    loss = metric_series(events, "train/loss")
    assert all(map(math.isfinite, loss.values())) and loss[12] < loss[4]
    assert 0.0 <= metric_series(events, "val/accuracy")[12] <= 1.0
    ckpt = load_checkpoint(tmp_path / "run" / "checkpoints" / "step_00000012.pt")
    assert ckpt["model"]["features.1.running_mean"].dtype == torch.float32  # weights stay fp32 under autocast
