"""trainer/rank_progress.py: a rank's record on disk (what it did last, its step and work times), and the
reader the worker uses (no link followed, a torn or foreign file skipped)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from trainer.rank_progress import RankProgress, read_all


def test_a_record_says_the_last_step_and_the_medians(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("RANKZERO_ATTEMPT", "3")
    clock = iter([10.0, 10.1, 10.5, 11.0, 11.2, 11.5, 12.0]).__next__
    monkeypatch.setattr("trainer.rank_progress.time.monotonic", clock)
    ranks = tmp_path / "ranks"
    p = RankProgress(ranks, 2)
    for step in (1, 2):  # work 0.1 then 0.2; step ends at 10.5, 11.5 (and the wall start 10.0 unmarked)
        p.work_began()
        p.work_ended()
        p.step_done(step)
    p.work_began()  # hung inside its work of step 3
    p.close()
    record = read_all(ranks, tmp_path)[2]
    assert record["step"] == 2 and record["phase"] == "work" and record["attempt"] == 3
    assert record["pid"] == os.getpid() and record["step_s"] == 1.0
    assert abs(record["work_s"] - 0.15) < 1e-9


def test_the_thread_writes_what_changed(tmp_path: Path) -> None:
    from tests.support.deadlines import deadline_in

    p = RankProgress(tmp_path / "ranks", 0, every_s=0.05).start()
    try:
        p.step_done(7)
        deadline = deadline_in(10)
        import time

        while read_all(tmp_path / "ranks", tmp_path).get(0, {}).get("step") != 7:
            assert time.monotonic() < deadline, "the writer thread never wrote step 7"
            time.sleep(0.02)
    finally:
        p.close()


def test_the_reader_skips_links_torn_and_foreign_files(tmp_path: Path) -> None:
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    (ranks / "rank_0.json").write_text(json.dumps({"rank": 0, "step": 4}))
    (ranks / "rank_1.json").write_text('{"rank": 1, "st')  # torn
    (ranks / "rank_2.json").write_text(json.dumps({"rank": "2"}))  # not a rank
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"rank": 3, "step": 1}))
    (ranks / "rank_3.json").symlink_to(secret)
    (ranks / "rank_4.json").write_text(json.dumps({"rank": 4, "pad": "x" * 10_000}))  # too long
    (ranks / "notes.txt").write_text("{}")
    assert read_all(ranks, tmp_path) == {0: {"rank": 0, "step": 4}}
    assert read_all(tmp_path / "none", tmp_path) == {}
