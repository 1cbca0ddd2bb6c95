"""The trainer's parts in-process: spec files, schedules, models, data sets, refusals, events, checkpoints."""

from __future__ import annotations

import json
import math

import pytest
import torch
from PIL import Image

from tests.support.trainer_runs import make_spec
from trainer import checkpoint as ckpt_io
from trainer.data.datasets import build_datasets
from trainer.dist import setup
from trainer.events import EventLog, last_seq
from trainer.models import build_model
from trainer.optim import lr_factor
from trainer.run_dir import RunDir
from trainer.spec import DataSpec, JobSpec, ModelSpec, SchedulerSpec
from trainer.spec_file import load_spec


def test_spec_file_json_and_yaml(tmp_path):
    (tmp_path / "s.json").write_text(json.dumps({"max_steps": 3, "batch_size": 4}))
    (tmp_path / "s.yaml").write_text("max_steps: 3\nbatch_size: 4\noptimizer: {name: adamw, lr: 0.001}\n")
    assert load_spec(tmp_path / "s.json").batch_size == 4
    assert load_spec(tmp_path / "s.yaml").optimizer.name == "adamw"
    (tmp_path / "bad.yaml").write_text("max_steps: 3\nwhat: 1\n")
    with pytest.raises(ValueError, match="what"):
        load_spec(tmp_path / "bad.yaml")


def test_schedules():
    total = 100
    const = SchedulerSpec(name="constant", warmup_steps=4)
    assert [lr_factor(const, s, total) for s in range(5)] == [0.25, 0.5, 0.75, 1.0, 1.0]
    cos = SchedulerSpec(name="cosine", warmup_steps=10, min_lr_ratio=0.1)
    assert lr_factor(cos, 10, total) == pytest.approx(1.0)
    assert lr_factor(cos, 55, total) == pytest.approx(0.1 + 0.9 * 0.5)
    assert lr_factor(cos, 100, total) == pytest.approx(0.1)
    step = SchedulerSpec(name="step", step_size=10, gamma=0.5)
    assert [lr_factor(step, s, total) for s in (0, 9, 10, 25)] == [1.0, 1.0, 0.5, 0.25]
    assert not any(math.isnan(lr_factor(cos, s, 1)) for s in range(3))


def test_models_build_and_run():
    conv = build_model(ModelSpec(name="convnet", args={"in_channels": 1, "num_classes": 10}))
    assert conv(torch.randn(2, 1, 8, 8)).shape == (2, 10)
    assert any(isinstance(m, torch.nn.BatchNorm2d) for m in conv.modules())
    r18 = build_model(ModelSpec(name="resnet18", args={"num_classes": 5, "in_channels": 1}))
    assert r18(torch.randn(2, 1, 32, 32)).shape == (2, 5)
    assert build_model(ModelSpec(name="mlp", args={"in_features": 6, "hidden": [8, 8], "num_classes": 2}))(
        torch.randn(3, 6)
    ).shape == (3, 2)
    with pytest.raises(TypeError, match="model.args"):  # a spec made without validation (the spec refuses it)
        build_model(ModelSpec.model_construct(name="mlp", args={"widht": 3}))


def test_builtin_data_sets(tmp_path):
    train, val = build_datasets(DataSpec(name="digits", args={"image": True}, val_fraction=0.1), seed=0)
    assert len(train) + len(val) == 1797 and train[0][0].shape == (1, 8, 8)
    a, _ = build_datasets(DataSpec(name="synthetic", args={"num_samples": 64}, val_fraction=0.25), seed=3)
    b, _ = build_datasets(DataSpec(name="synthetic", args={"num_samples": 64}, val_fraction=0.25), seed=3)
    assert len(a) == 48 and torch.equal(a.inputs, b.inputs)  # seeded: every rank builds the same data
    fake_train, fake_val = build_datasets(
        DataSpec(name="fake", args={"num_samples": 20, "image_size": [3, 8, 8]}, val_fraction=0.2), 0
    )
    assert len(fake_train) == 16 and fake_train[0][0].shape == (3, 8, 8)
    for cls in ("cats", "dogs"):
        (tmp_path / "imgs" / cls).mkdir(parents=True)
        for i in range(5):
            Image.new("RGB", (10, 12), (i * 40, 0, 0)).save(tmp_path / "imgs" / cls / f"{i}.png")
    folder, folder_val = build_datasets(
        DataSpec(name="image_folder", args={"path": str(tmp_path / "imgs"), "image_size": 8}, val_fraction=0.2), 0
    )
    assert len(folder) == 8 and len(folder_val) == 2 and folder[0][0].shape == (3, 8, 8)


def test_missing_torchvision_files_say_what_to_do(tmp_path):
    with pytest.raises(FileNotFoundError, match="download"):
        build_datasets(DataSpec(name="cifar10", args={"root": str(tmp_path), "download": False}), 0)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(sync="dataparallel"), "at least 2 visible GPUs"),
        (dict(nproc=2, sync_batchnorm=True), "sync_batchnorm needs CUDA"),
        (dict(precision="fp16", device="auto"), "fp16 needs CUDA"),
        (dict(nproc=2), "launch with torchrun --nproc_per_node=2"),
    ],
)
def test_setup_refuses_what_cannot_work_here(overrides, message, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", str(overrides.get("nproc", 1)) if "sync_batchnorm" in overrides else "1")
    spec = JobSpec.model_validate(make_spec(**{**overrides, "device": overrides.get("device", "cpu")}))
    if torch.cuda.is_available():
        pytest.skip("refusals are about hosts without a GPU")
    with pytest.raises(ValueError, match=message):
        setup(spec)


def test_event_log_continues_seq_and_skips_a_torn_line(tmp_path):
    path = tmp_path / "events.jsonl"
    log = EventLog(path)
    log.emit("started", a=1)
    log.emit("finished", step=1)
    log.close()
    with path.open("a") as f:
        f.write('{"seq": 3, "ti')  # a crash mid-line
    assert last_seq(path) == 2
    path.write_text(path.read_text().rsplit("\n", 1)[0] + "\n")
    log = EventLog(path)
    log.emit("progress", step=2)
    log.close()
    seqs = [json.loads(line)["seq"] for line in path.read_text().splitlines()]
    assert seqs == [1, 2, 3]
    silent = EventLog(tmp_path / "other.jsonl", enabled=False)
    silent.emit("started")
    silent.close()
    assert not (tmp_path / "other.jsonl").exists()


def test_checkpoint_write_is_atomic_and_prune_keeps_the_newest(tmp_path):
    run = RunDir(tmp_path)
    for step in (3, 6, 9, 12):
        saved = ckpt_io.write_atomic(
            run.checkpoint_path(step),
            {"step": step, "w": torch.ones(3) * step, "rng": ckpt_io.capture_rng(torch.device("cpu"))},
        )
        assert saved.bytes == saved.path.stat().st_size
    assert not list(run.checkpoints.glob(".*"))  # no temp files left behind
    ckpt_io.prune(run, keep_last=2)
    assert [s for s, _ in ckpt_io.list_checkpoints(run)] == [9, 12]
    loaded = ckpt_io.load(run.checkpoint_path(12))
    assert loaded["step"] == 12 and torch.equal(loaded["w"], torch.full((3,), 12.0))
    with pytest.raises(FileNotFoundError, match="resume_from"):
        ckpt_io.load(tmp_path / "nope.pt")


def test_a_failing_peer_writes_the_failed_event_when_rank_0_cannot(tmp_path, monkeypatch):
    """If rank 0 dies without reporting (gloo can abort it when a peer's connection drops), the
    failing rank appends the `failed` event itself, continuing seq."""
    import time as _time

    from trainer import failures

    monkeypatch.setattr(failures, "FALLBACK_WAIT_S", 0.3)
    log = EventLog(tmp_path / "events.jsonl")
    log.emit("started")
    log.close()
    since = _time.time()
    failures.report_failure(
        tmp_path, 1, 2, RuntimeError("peer blew up"), EventLog(tmp_path / "x", enabled=False), since
    )
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [e["seq"] for e in events] == [1, 2]
    assert events[-1]["type"] == "failed" and events[-1]["rank"] == 1 and "peer blew up" in events[-1]["error"]
    # and when rank 0 did report, the peer adds nothing
    failures.report_failure(tmp_path, 1, 2, RuntimeError("again"), EventLog(tmp_path / "x", enabled=False), since)
    assert len((tmp_path / "events.jsonl").read_text().splitlines()) == 2
