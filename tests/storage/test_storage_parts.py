"""The artifact store's decisions, by table: which paths may be named or shipped, which stored
checkpoints keep_last prunes, a host's storage, which outputs an `outputs` glob selects, the record
a resumed job's events.jsonl is given back (pure or on tmp files; no service)."""

from __future__ import annotations

import json

import pytest

from api.routes.outputs import selected
from core.artifacts import keys, prune, sharing
from core.artifacts.disk import DiskStore, OffsetGap
from worker.artifact_shipping import GAP_EVENT, fill_gap


@pytest.mark.parametrize(
    ("raw", "ok"),
    [
        ("checkpoints/step_00000004.pt", True),
        ("logs/attempt_1/x/0/stdout.log", True),
        ("work/plots/loss.txt", True),
        ("events.jsonl", True),
        ("spec.json", True),
        ("../job_2/events.jsonl", False),
        ("/etc/passwd", False),
        ("work/../../x", False),
        ("work//x", False),
        ("work/./x", False),
        ("work/a\\b", False),
        ("work/a\x00b", False),
        ("other/file", False),  # not an area a job ships
        ("work", False),  # an area, not a file in it
        ("w/" * 40 + "x", False),  # too deep
    ],
)
def test_shipped_paths(raw: str, ok: bool) -> None:
    if ok:
        assert keys.shipped_path(raw) == raw
    else:
        with pytest.raises(keys.BadKey):
            keys.shipped_path(raw)


@pytest.mark.parametrize(
    ("stored", "keep_last", "pruned"),
    [
        ([], 3, []),
        (["job_1/checkpoints/step_00000002.pt"], 1, []),
        ([f"job_1/checkpoints/step_{s:08d}.pt" for s in (10, 2, 4, 8, 6)], 3,
         ["job_1/checkpoints/step_00000002.pt", "job_1/checkpoints/step_00000004.pt"]),
        (["job_1/checkpoints/step_00000002.pt", "job_1/checkpoints/notes.txt"], 1, []),  # only checkpoints
    ],
)  # fmt: skip
def test_keep_last_in_the_store(stored: list[str], keep_last: int, pruned: list[str]) -> None:
    assert prune.to_prune(stored, keep_last) == pruned


@pytest.mark.parametrize(
    ("marker", "can_upload", "storage", "group"),
    [
        (True, False, "shared", sharing.REACHES_API),
        (True, True, "shared", sharing.REACHES_API),
        (False, True, "store", sharing.REACHES_API),
        (False, False, "unknown", "own-id"),
    ],
)
def test_host_storage_and_its_placement_group(marker: bool, can_upload: bool, storage: str, group: str) -> None:
    assert sharing.decide(marker, can_upload) == storage
    assert sharing.placement_group(storage, "own-id") == group


@pytest.mark.parametrize(
    ("path", "patterns", "chosen"),
    [
        ("model.pt", [], True),
        ("plots/a.png", ["plots/*.png"], True),
        ("plots/deep/a.png", ["plots/*.png"], True),  # `*` crosses folders
        ("plots/a.txt", ["plots/*.png"], False),
        ("export.onnx", ["*.png", "*.onnx"], True),
    ],
)
def test_outputs_globs(path: str, patterns: list[str], chosen: bool) -> None:
    assert selected(path, patterns) is chosen


def test_appends_are_idempotent_by_offset(tmp_path) -> None:
    store = DiskStore(tmp_path)
    assert store.append("job_1/events.jsonl", 0, b"abc") == 3
    assert store.append("job_1/events.jsonl", 0, b"abc") == 3  # repeated: nothing written twice
    assert store.append("job_1/events.jsonl", 1, b"bcde") == 5  # overlapping: only the new tail
    with pytest.raises(OffsetGap) as gap:
        store.append("job_1/events.jsonl", 9, b"x")
    assert gap.value.size == 5
    assert (tmp_path / "job_1/events.jsonl").read_bytes() == b"abcde"


def test_the_record_of_a_lost_host_is_made_gapless(tmp_path) -> None:
    events = tmp_path / "events.jsonl"
    events.write_text("".join(json.dumps({"seq": s, "type": "progress"}) + "\n" for s in (1, 2, 3)))
    assert fill_gap(events, 6) == 3  # seqs 4-6 were ingested from the lost host's copy, never shipped
    lines = [json.loads(line) for line in events.read_text().splitlines()]
    assert [e["seq"] for e in lines] == [1, 2, 3, 4, 5, 6]
    assert {e["type"] for e in lines[3:]} == {GAP_EVENT}
    assert fill_gap(events, 6) == 0 and fill_gap(events, 2) == 0
