"""Issue 13 (speed), the trainer's side: checkpoints saved on a background thread (byte-identical,
atomic, sha256, the final one waited for, a failed write fails the run and records nothing),
`compile: true`, the start-up stamps and the digits table read without importing scikit-learn.

The in-process runs call `train()` directly (one process, a few steps), as tests/trainer/probe.py does."""

from __future__ import annotations

import errno
import hashlib
import io
import threading
import time

import pytest
import torch

from tests.support.trainer_runs import load_checkpoint, make_spec, metric_series, read_events
from trainer import checkpoint as ckpt_io
from trainer.data.datasets import _digits_table
from trainer.run_dir import RunDir
from trainer.spec import JobSpec
from trainer.train import progress_line, train


def _state() -> dict:
    """A checkpoint-shaped payload: a model with a shared storage, an optimizer with momentum."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.BatchNorm1d(5), torch.nn.Linear(5, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(8, 6)).sum().backward()
    opt.step()
    sd = model.state_dict()
    sd["tied"] = sd["0.weight"][1:]  # a view of another entry's storage
    return {"model": sd, "optimizer": opt.state_dict(), "step": 3, "rng": [{"cpu": torch.get_rng_state()}]}, model


def _saved_bytes(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def test_a_snapshot_saves_byte_identical_and_later_steps_do_not_change_it() -> None:
    state, model = _state()
    before = _saved_bytes(state)
    snap = ckpt_io.snapshot(state)
    assert _saved_bytes(snap) == before  # same storages, same sharing, same `_metadata`
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)  # the next training step
    assert _saved_bytes(snap) == before
    assert not torch.equal(snap["model"]["0.weight"], state["model"]["0.weight"])
    reuse: dict = {}
    first = ckpt_io.snapshot(state, reuse)
    kept = {k: b.data_ptr() for k, b in reuse.items()}
    del first  # written: its host buffers are free for the next save's snapshot
    again = ckpt_io.snapshot(state, reuse)
    assert {k: b.data_ptr() for k, b in reuse.items()} == kept  # copied into, not allocated
    assert _saved_bytes(again) == _saved_bytes(state)  # the live (changed) state, byte for byte
    loaded = torch.load(io.BytesIO(before), weights_only=True)
    tied, weight = loaded["model"]["tied"], loaded["model"]["0.weight"]
    assert tied.untyped_storage().data_ptr() == weight.untyped_storage().data_ptr()


def test_the_background_writer_keeps_one_save_in_flight_and_hands_back_whole_files(tmp_path, monkeypatch) -> None:
    real, writing = ckpt_io.write_atomic, []

    def slow_write(path, payload):
        writing.append((path.name, threading.current_thread().name))
        time.sleep(0.3)
        return real(path, payload)

    monkeypatch.setattr(ckpt_io, "write_atomic", slow_write)
    run = RunDir(tmp_path)
    writer = ckpt_io.AsyncCheckpointWriter(run, keep_last=1)
    state, _ = _state()
    assert writer.submit(run.checkpoint_path(1), state, meta="a") == []
    assert writer.in_flight and writer.poll() == []  # still writing: the caller goes on
    previous = writer.submit(run.checkpoint_path(2), state, meta="b")  # waits for the first
    assert [(s.path.name, m) for s, m in previous] == [("step_00000001.pt", "a")]
    ((saved, meta),) = writer.wait()
    assert meta == "b" and not writer.in_flight
    blob = saved.path.read_bytes()
    assert saved.bytes == len(blob) and saved.sha256 == hashlib.sha256(blob).hexdigest()
    assert blob == _saved_bytes(state)
    assert all(thread == "checkpoint-writer" for _, thread in writing)
    assert [p.name for p in run.checkpoints.iterdir()] == ["step_00000002.pt"]  # pruned to keep_last, no temp


def test_a_failed_background_write_is_raised_not_returned(tmp_path) -> None:
    run = RunDir(tmp_path)
    run.checkpoints.parent.mkdir(parents=True, exist_ok=True)
    run.checkpoints.write_text("not a folder")  # every write under it fails
    writer = ckpt_io.AsyncCheckpointWriter(run, keep_last=2)
    writer.submit(run.checkpoint_path(5), {"w": torch.ones(2)}, meta=None)
    with pytest.raises(OSError):
        writer.wait()
    assert writer.wait() == []  # reported once; nothing left in flight


def _spec(**overrides) -> JobSpec:
    return JobSpec.model_validate(make_spec(**overrides))


def test_training_goes_on_while_a_checkpoint_is_written_and_the_last_is_waited_for(tmp_path, monkeypatch) -> None:
    real = ckpt_io.write_atomic

    def slow_write(path, payload):
        time.sleep(0.5)  # a slow disk: steps after the save run meanwhile
        return real(path, payload)

    monkeypatch.setattr(ckpt_io, "write_atomic", slow_write)
    spec = _spec(max_steps=12, log_every=1, eval_every=None, checkpoint={"every_steps": 4, "keep_last": 5})
    assert train(spec, tmp_path / "run") == 0
    events = read_events(tmp_path / "run")
    order = [(e["type"], e.get("step")) for e in events if e["type"] in ("checkpoint", "metric", "finished")]
    saved = [s for t, s in order if t == "checkpoint"]
    assert saved == [4, 8, 12]
    # step 4's checkpoint event comes after later steps' metrics: the write did not hold the loop
    assert order.index(("checkpoint", 4)) > order.index(("metric", 5))
    assert order[-1] == ("finished", 12) and order[-2] == ("checkpoint", 12)  # the final save waited for
    for e in (e for e in events if e["type"] == "checkpoint"):
        blob = (tmp_path / "run" / e["path"]).read_bytes()
        assert e["bytes"] == len(blob) and e["sha256"] == hashlib.sha256(blob).hexdigest()
        assert load_checkpoint(tmp_path / "run" / e["path"])["step"] == e["step"]


def test_a_checkpoint_write_that_fails_in_the_background_fails_the_run(tmp_path, monkeypatch) -> None:
    real = ckpt_io.write_atomic

    def full_disk_at_step_10(path, payload):
        if path.name == "step_00000010.pt":
            raise ckpt_io.CheckpointWriteError(path, OSError(errno.ENOSPC, "No space left on device"))
        return real(path, payload)

    monkeypatch.setattr(ckpt_io, "write_atomic", full_disk_at_step_10)
    spec = _spec(max_steps=30, log_every=1, eval_every=None, checkpoint={"every_steps": 5, "keep_last": 5})
    with pytest.raises(ckpt_io.CheckpointWriteError, match="No space left on device"):
        train(spec, tmp_path / "run")
    events = read_events(tmp_path / "run")
    assert [e["step"] for e in events if e["type"] == "checkpoint"] == [5]  # nothing recorded for step 10
    failed = events[-1]
    assert failed["type"] == "failed" and "step_00000005.pt is intact" in failed["error"]
    # raised at the first step boundary after the writer gave up, at the latest by the next save (15)
    assert max(e["step"] for e in events if e["type"] == "metric") <= 15
    assert [p.name for p in (tmp_path / "run" / "checkpoints").iterdir()] == ["step_00000005.pt"]


def test_started_carries_start_up_stamps_and_rank_0_prints_progress(tmp_path, capsys) -> None:
    spec = _spec(max_steps=6, log_every=3, eval_every=None, checkpoint={"every_steps": None})
    assert train(spec, tmp_path / "run") == 0
    events = read_events(tmp_path / "run")
    stamps = events[0]["startup"]
    assert list(stamps) == ["imports", "rendezvous", "data", "build"]
    assert 0 < stamps["imports"] <= stamps["rendezvous"] <= stamps["data"] <= stamps["build"]
    progress = [e for e in events if e["type"] == "progress"]
    assert progress[0]["first_step_s"] >= stamps["build"] and "first_step_s" not in progress[1]
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step ")]
    assert [line.split()[1] for line in lines] == ["3/6", "6/6"] and "samples/s" in lines[0] and "loss" in lines[0]
    assert progress_line(40, 300, 0.41234, 1234.5, 125.0) == (
        "step 40/300 (13%)  loss 0.4123  1,234 samples/s  ETA 0:02:05"
    )


def test_compile_true_trains_like_eager_and_keeps_its_cache_in_the_run_dir(tmp_path, monkeypatch) -> None:
    for name in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):  # unset now, restored after (train sets them)
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    common = dict(max_steps=6, log_every=1, eval_every=None, checkpoint={"every_steps": None})
    assert train(_spec(**common), tmp_path / "eager") == 0
    assert train(_spec(compile=True, **common), tmp_path / "compiled") == 0
    eager = metric_series(read_events(tmp_path / "eager"), "train/loss")
    compiled = metric_series(read_events(tmp_path / "compiled"), "train/loss")
    assert sorted(compiled) == list(range(1, 7))
    for step, loss in eager.items():
        assert compiled[step] == pytest.approx(loss, rel=1e-4, abs=1e-6), step
    ckpt = load_checkpoint(tmp_path / "compiled" / "checkpoints" / "step_00000006.pt")
    assert not any("_orig_mod" in k for k in ckpt["model"])  # the plain module's names
    assert any((tmp_path / "compiled" / "compile_cache").rglob("*")), "inductor's cache is not in the run dir"


def test_digits_are_read_without_scikit_learn_and_equal_load_digits() -> None:
    from sklearn.datasets import load_digits

    pixels, labels = _digits_table()
    d = load_digits()
    assert (pixels == d.data).all() and (labels == d.target).all() and labels.dtype == d.target.dtype


def test_compile_without_a_compiler_trains_eagerly_and_says_so(tmp_path, monkeypatch, capsys) -> None:
    import trainer.strategy

    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr(trainer.strategy.shutil, "which", lambda name: None)
    spec = _spec(compile=True, max_steps=3, log_every=1, eval_every=None, checkpoint={"every_steps": None})
    assert train(spec, tmp_path / "run") == 0
    assert "compile: true ignored on this host, training eagerly: no C++ compiler found" in capsys.readouterr().err
    assert read_events(tmp_path / "run")[-1] == {**read_events(tmp_path / "run")[-1], "type": "finished", "step": 3}
    assert not (tmp_path / "run" / "compile_cache").exists()
