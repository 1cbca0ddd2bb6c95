"""The SDK's parts in one process: the shared event writer's deferred events, the job environment,
checkpoints (atomic, pruned, damaged files skipped, weights_only), and local mode."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import rankzero
from rankzero import _runtime, _stop
from rankzero import env as rz_env
from trainer.event_types import EventType
from trainer.events import EventLog, last_seq


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_emit_later_computes_fields_on_the_writer_thread_in_order(tmp_path):
    path = tmp_path / "events.jsonl"
    log = EventLog(path)
    log.emit(EventType.progress, step=1, total_steps=3)
    log.emit_later(EventType.metric, 2, lambda: [{"step": 1, "name": "a", "value": 1.0}, {"step": 1, "name": "b"}])
    log.emit_later(EventType.metric, 1, lambda: 1 / 0)  # a failure drops its events, not later ones
    log.emit_later(EventType.metric, 2, lambda: [{"step": 1}])  # a wrong count too
    log.emit(EventType.finished, step=3)
    log.close()
    events = _lines(path)
    assert [(e["seq"], e["type"]) for e in events] == [(1, "progress"), (2, "metric"), (3, "metric"), (7, "finished")]
    assert events[1] == {"seq": 2, "time": events[1]["time"], "type": "metric", "step": 1, "name": "a", "value": 1.0}
    assert last_seq(path) == 7  # a resumed run continues after the reserved seqs


def test_env_names_round_trip():
    job = rz_env.JobEnv(run_dir=Path("/r/job_3"), job_id=3, attempt=2, datasets_dir=Path("/d"), keep_last=5)
    environ = job.as_environ()
    assert set(environ) <= set(rz_env.NAMES)
    assert rz_env.read(environ) == job
    assert rz_env.read({}).local and rz_env.read({}).keep_last == rz_env.DEFAULT_KEEP_LAST
    with pytest.raises(ValueError, match="RANKZERO_KEEP_LAST"):
        rz_env.read({rz_env.KEEP_LAST: "0"})


@pytest.fixture
def job_dir(tmp_path, monkeypatch):
    """This process as rank 0 of a job whose run dir is tmp_path/run (no process group)."""
    run_dir = tmp_path / "run"
    for name in rz_env.NAMES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(rz_env.RUN_DIR, str(run_dir))
    monkeypatch.setenv(rz_env.KEEP_LAST, "2")
    monkeypatch.delenv("RANK", raising=False)
    _runtime.reset()
    yield run_dir
    _runtime.reset()


def test_single_process_job_logs_saves_prunes_and_loads(job_dir):
    assert rankzero.load_checkpoint() is None
    rankzero.log(1, {"loss": torch.tensor(0.5, dtype=torch.bfloat16), "nan": torch.tensor(float("nan")), "lr": 3})
    for step in (1, 2, 3):
        rankzero.save_checkpoint({"w": torch.full((2,), float(step)), "step": step}, step)
    _runtime.close()
    assert rankzero.load_checkpoint(map_location="cpu")["step"] == 3
    assert sorted(p.name for p in (job_dir / "checkpoints").iterdir()) == ["step_00000002.pt", "step_00000003.pt"]
    events = _lines(job_dir / "events.jsonl")
    metrics = {e["name"]: e["value"] for e in events if e["type"] == "metric"}
    assert metrics == {"loss": 0.5, "nan": None, "lr": 3.0}  # nan is written as null, which the ingester skips
    assert [e["path"] for e in events if e["type"] == "checkpoint"] == [
        f"checkpoints/step_0000000{s}.pt" for s in (1, 2, 3)
    ]


def test_load_skips_a_damaged_file_and_refuses_unsafe_objects(job_dir, capsys):
    rankzero.save_checkpoint({"step": 1}, 1)
    newest = rankzero.save_checkpoint({"step": 2}, 2)
    newest.write_bytes(newest.read_bytes()[:50])  # torn (e.g. a disk that lost its tail)
    assert rankzero.load_checkpoint()["step"] == 1
    assert "skipping checkpoint step_00000002.pt" in capsys.readouterr().err
    rankzero.save_checkpoint({"when": Path("/x")}, 3)  # not a weights-only type
    with pytest.raises(rankzero.UnsafeCheckpointError, match="weights_only=False"):
        rankzero.load_checkpoint()
    assert rankzero.load_checkpoint(weights_only=False)["when"] == Path("/x")


def test_local_mode_is_a_no_op(tmp_path, monkeypatch, capsys):
    for name in rz_env.NAMES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    agreement = _stop._Agreement()
    monkeypatch.setattr(_stop, "_agreement", agreement)
    _runtime.reset()
    try:
        rankzero.log(1, {"loss": torch.tensor(1.0)})
        rankzero.progress(1, 10)
        assert rankzero.save_checkpoint({"a": 1}, 1) is None
        assert rankzero.load_checkpoint() is None
        assert rankzero.should_stop() is False
        agreement.signal.requested = True  # what the SIGTERM handler does
        assert rankzero.should_stop() is True
    finally:
        agreement.signal.uninstall()  # give pytest its own SIGTERM handling back
        _runtime.reset()
    assert list(tmp_path.iterdir()) == []
    assert capsys.readouterr().err.count("RANKZERO_RUN_DIR is not set") == 1


def test_flush_waits_for_queued_events_even_while_lingering(tmp_path):
    """A checkpoint's event must be on disk when save_checkpoint returns (it vouches for the file)."""
    path = tmp_path / "events.jsonl"
    log = EventLog(path, linger_s=3600.0)  # a linger no test would wait out: flush must end it
    log.emit(EventType.metric, step=1, name="a", value=1.0)
    log.emit(EventType.finished, step=1)
    assert log.flush(timeout=60)
    assert [e["type"] for e in _lines(path)] == ["metric", "finished"]
    log.emit(EventType.finished, step=2)
    assert log.flush(timeout=60) and len(_lines(path)) == 3
    log.close()
    assert EventLog(tmp_path / "off.jsonl", enabled=False).flush()


def test_a_saved_checkpoint_is_recorded_before_save_returns(job_dir):
    from trainer.checkpoint_files import newest_intact, recorded_shas
    from trainer.run_dir import RunDir

    path = rankzero.save_checkpoint({"step": 1}, 1)  # the writer lingers; the save does not wait it out
    run = RunDir(job_dir)
    assert newest_intact(run, recorded_shas(run)) == path.resolve()


def test_all_names_the_lazy_calls_and_each_resolves():
    """__all__ is spelled out for type checkers; it must stay the lazy table's names plus the constants."""
    assert set(rankzero.__all__) == {"EXIT_OK", "EXIT_STOPPED", "job", *rankzero._CALLS}
    assert all(getattr(rankzero, name) is not None for name in rankzero.__all__)
