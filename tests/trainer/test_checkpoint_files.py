"""The one "newest intact checkpoint" rule (trainer/checkpoint_files.py), torch-free: the newest
`checkpoints/step_*.pt` whose bytes match the sha256 recorded for it; anything else falls back."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from trainer.checkpoint_files import (
    checkpoint_step,
    intact_newest_first,
    list_checkpoints,
    newest_intact,
    recorded_shas,
)
from trainer.run_dir import RunDir


def _write(run: RunDir, step: int, data: bytes) -> tuple[str, str]:
    path = run.checkpoint_path(step)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return str(path.relative_to(run.root)), hashlib.sha256(data).hexdigest()


def _run_with_three(tmp_path: Path) -> tuple[RunDir, dict[str, str]]:
    run = RunDir(tmp_path / "run")
    recorded = dict(_write(run, step, bytes([step]) * 1000) for step in (10, 20, 30))
    return run, recorded


def _flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:100])


def _delete(path: Path) -> None:
    path.unlink()


@pytest.mark.parametrize(
    ("damage", "expected_step"),
    [(None, 30), (_truncate, 20), (_flip_a_byte, 20), (_delete, 20)],
    ids=["all-intact", "newest-truncated", "newest-byte-flipped", "newest-deleted"],
)
def test_newest_intact_falls_back_past_a_damaged_newest(tmp_path, damage, expected_step) -> None:
    run, recorded = _run_with_three(tmp_path)
    if damage is not None:
        damage(run.checkpoint_path(30))
    assert newest_intact(run, recorded) == run.checkpoint_path(expected_step).resolve()


def test_a_file_no_record_vouches_for_is_passed_over_and_said_why(tmp_path) -> None:
    run, recorded = _run_with_three(tmp_path)
    _write(run, 40, b"written, then the rank died before its event")
    _truncate(run.checkpoint_path(30))
    passed_over: list[tuple[Path, str]] = []
    assert next(intact_newest_first(run, recorded, passed_over=passed_over)) == run.checkpoint_path(20).resolve()
    (newer, unvouched), (torn, mismatch) = passed_over
    assert newer.name == "step_00000040.pt" and "no checkpoint event" in unvouched
    assert torn.name == "step_00000030.pt" and "do not match" in mismatch


def test_none_when_nothing_is_intact_or_there_is_nothing(tmp_path) -> None:
    run, recorded = _run_with_three(tmp_path)
    assert newest_intact(RunDir(tmp_path / "empty"), recorded) is None
    assert newest_intact(run, {}) is None
    for step in (10, 20, 30):
        _flip_a_byte(run.checkpoint_path(step))
    assert newest_intact(run, recorded) is None


def test_listing_orders_by_step_and_ignores_temp_and_other_files(tmp_path) -> None:
    run, _ = _run_with_three(tmp_path)
    _write(run, 123_456_789, b"nine digits")
    (run.checkpoints / ".step_00000040.pt.tmp-123").write_bytes(b"half")
    (run.checkpoints / "notes.txt").write_text("x")
    assert [s for s, _ in list_checkpoints(run)] == [10, 20, 30, 123_456_789]


@pytest.mark.parametrize(
    ("name", "step"),
    [("checkpoints/step_00000120.pt", 120), ("/r/job_1/checkpoints/step_00000000.pt", 0), ("step_1.pt", None),
     ("model.pt", None), ("", None)],
)  # fmt: skip
def test_checkpoint_step(name, step) -> None:
    assert checkpoint_step(name) == step


def test_recorded_shas_reads_checkpoint_events_and_skips_torn_lines(tmp_path) -> None:
    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    lines = [
        {"seq": 1, "type": "metric", "step": 1, "name": "checkpoint", "value": 1.0},
        {"seq": 2, "type": "checkpoint", "step": 1, "path": "checkpoints/step_00000001.pt", "sha256": "a"},
        {"seq": 3, "type": "checkpoint", "step": 1, "path": "checkpoints/step_00000001.pt", "sha256": "b"},
        {"seq": 4, "type": "checkpoint", "step": 2, "path": "checkpoints/step_00000002.pt"},  # no sha recorded
    ]
    text = "".join(json.dumps(e) + "\n" for e in lines) + '{"seq": 5, "type": "checkpoint", "pa'  # torn
    run.events.write_text(text)
    assert recorded_shas(run) == {"checkpoints/step_00000001.pt": "b"}  # a later event for a path wins
    assert recorded_shas(RunDir(tmp_path / "none")) == {}
