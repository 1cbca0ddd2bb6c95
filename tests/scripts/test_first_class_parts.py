"""Issue 22 part A, the pure parts: entrypoint variables, a script job's environment (resume, elastic fit),
its resume spec, the merged console's marks and merge, the step from metrics, the CLI's views, the SDK's
crash flag and the failure headline."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from pydantic import ValidationError
from rich.console import Console

from cli import views
from core import console_log
from core.console_log import ConsoleLine, LogFile
from core.resume import resume_spec
from rankzero import env
from trainer.entrypoint import parse_entrypoint
from trainer.spec import JobSpec
from worker.errors import _exception_line
from worker.ingest_handlers import step_from_metrics
from worker.script_jobs import script_job_env

CODE = "sha256:" + "a" * 64

# --- entrypoint variables --------------------------------------------------------------------------

VALUES = {"RANKZERO_DATASETS_DIR": "/data/sets", "RANKZERO_RUN_DIR": "/runs/job_7", "RANKZERO_JOB_ID": "7"}


@pytest.mark.parametrize(
    ("line", "args"),
    [
        ("train.py --data ${RANKZERO_DATASETS_DIR}/mnist", ["--data", "/data/sets/mnist"]),
        ("train.py --out=${RANKZERO_RUN_DIR}/x --id ${RANKZERO_JOB_ID}", ["--out=/runs/job_7/x", "--id", "7"]),
        ("train.py --price '$$5'", ["--price", "$5"]),
        ("-m pkg.main ${RANKZERO_JOB_ID}", ["7"]),
        ("train.py plain", ["plain"]),
    ],
)
def test_entrypoint_variables_are_expanded_in_the_arguments(line: str, args: list[str]) -> None:
    assert parse_entrypoint(line).expanded(VALUES).args == tuple(args)


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("train.py $HOME", "'$' is not expanded"),
        ("train.py ${HOME}", "'${HOME}' is not expanded"),
        ("train.py ${RANKZERO_API_TOKEN}", "'${RANKZERO_API_TOKEN}' is not expanded"),
        ("train.py $(whoami)", "'$' is not expanded"),
        ("train.py ${RANKZERO_RUN_DIR", "'$' is not expanded"),
    ],
)
def test_any_other_dollar_is_refused_at_submit(line: str, words: str) -> None:
    with pytest.raises(ValueError, match="only \\$\\{RANKZERO_DATASETS_DIR\\}") as caught:
        parse_entrypoint(line)
    assert words in str(caught.value) and "$$" in str(caught.value)


def test_the_spec_takes_the_variables_beside_params() -> None:
    spec = JobSpec.model_validate(
        {
            "code": CODE,
            "entrypoint": "train.py --lr ${params.lr} --data ${RANKZERO_DATASETS_DIR}",
            "params": {"lr": 0.1},
        }
    )
    assert spec.entrypoint == "train.py --lr 0.1 --data ${RANKZERO_DATASETS_DIR}"
    with pytest.raises(ValidationError, match="not expanded"):
        JobSpec.model_validate({"code": CODE, "entrypoint": "train.py ${USER}"})


# --- a script job's spec and environment -----------------------------------------------------------


def test_a_script_job_takes_resume_from_and_min_nproc_and_refuses_builtin_fields_in_words() -> None:
    spec = JobSpec.model_validate(
        {"code": CODE, "entrypoint": "train.py", "nproc": 4, "min_nproc": 2, "resume_from": "job_1/checkpoints/x.pt"}
    )
    assert spec.min_nproc == 2 and spec.resume_from == "job_1/checkpoints/x.pt"
    assert spec.elastic_sizes() == [4, 2]
    dumped = spec.model_dump(mode="json")
    assert dumped["resume_from"] and dumped["min_nproc"] == 2 and "epochs" not in dumped
    with pytest.raises(ValidationError, match="epochs only applies to the built-in trainer"):
        JobSpec.model_validate({"code": CODE, "entrypoint": "train.py", "epochs": 3})
    with pytest.raises(ValidationError, match="model, epochs only apply to the built-in trainer"):
        JobSpec.model_validate({"code": CODE, "entrypoint": "train.py", "epochs": 3, "model": {"name": "mlp"}})


def test_a_script_job_env_names_its_resume_checkpoint_and_elastic_shape(tmp_path: Path) -> None:
    ckpt = tmp_path / "job_1" / "checkpoints" / "step_00000004.pt"
    # Elastic fit launched 2 of 4 ranks: worker/attempt.py gave the spec nproc 2 and accumulation 2.
    got = script_job_env({"entrypoint": "train.py", "nproc": 2, "accumulation_steps": 2}, (ckpt,))
    assert got == {"resume_from": ckpt, "world_size": 2, "accumulation_steps": 2}
    assert script_job_env({"entrypoint": "train.py"}, ()) == {
        "resume_from": None,
        "world_size": 1,
        "accumulation_steps": 1,
    }
    assert script_job_env({"model": {"name": "mlp"}}, (ckpt,)) == {}  # the built-in trainer reads its spec
    described = env.JobEnv(run_dir=tmp_path, **got).as_environ()
    assert described[env.RESUME_FROM] == str(ckpt)
    assert described[env.WORLD_SIZE] == "2" and described[env.ACCUMULATION_STEPS] == "2"
    back = env.read(described)
    assert back.resume_from == ckpt and back.world_size == 2 and back.accumulation_steps == 2
    with pytest.raises(ValueError, match="RANKZERO_ACCUMULATION_STEPS=0 must be at least 1"):
        env.read({env.ACCUMULATION_STEPS: "0"})


def test_a_script_resume_only_adds_the_checkpoint() -> None:
    spec = {"name": "mine", "code": CODE, "entrypoint": "train.py --epochs 3"}
    new, how = resume_spec(spec, total_steps=None, checkpoint_step=40, resume_from="job_3/checkpoints/step_00000040.pt")
    assert new == {**spec, "name": "mine-resume", "resume_from": "job_3/checkpoints/step_00000040.pt"}
    assert "load_checkpoint" in how and "40" in how
    JobSpec.model_validate(new)  # the server takes it as it is


# --- the merged console ----------------------------------------------------------------------------


def test_marks_are_fixed_width_and_found_by_binary_search(tmp_path: Path) -> None:
    log = tmp_path / "0" / "stdout.log"
    log.parent.mkdir()
    log.write_bytes(b"")
    assert console_log.marks_path(log).name == "stdout.marks"
    with open(console_log.marks_path(log), "wb") as out:
        for size in range(10, 1000, 10):
            out.write(console_log.encode_mark(size, 1000.0 + size))
    assert console_log.decode_mark(console_log.encode_mark(5, 1.5)) == (5, 1.5)
    assert console_log.decode_mark(b"x" * console_log.RECORD) is None
    assert console_log.read_marks(log, 95, 125) == [(100, 1100.0), (110, 1110.0), (120, 1120.0), (130, 1130.0)]
    assert console_log.read_marks(log, 2000, 3000) == []
    assert console_log.read_marks(tmp_path / "none.log", 0, 10) == []


def test_the_writer_marks_grown_logs_and_lines_take_the_first_mark_past_their_end(tmp_path: Path) -> None:
    out, err = tmp_path / "0" / "stdout.log", tmp_path / "1" / "stderr.log"
    for p in (out, err):
        p.parent.mkdir()
        p.write_bytes(b"")
    writer = console_log.MarkWriter(tmp_path, rescan_s=0.0)
    out.write_bytes(b"a1\n")
    writer.note(100.0)
    err.write_bytes(b"b1\n")
    writer.note(100.1)  # within MARK_EVERY_S of out's mark: out not looked at; err's first mark
    with open(out, "ab") as f:
        f.write(b"a2\n")
    writer.note(101.0)
    with open(out, "ab") as f:
        f.write(b"a3 partial")
    writer.note(101.2)  # too soon for out
    files = [LogFile(0, "stdout", out), LogFile(1, "stderr", err)]
    lines, cursor = console_log.read_console(files, None, 65536, done=False)
    assert [(ln.rank, ln.text, ln.time) for ln in lines] == [(0, "a1", 100.0), (1, "b1", 100.1), (0, "a2", 101.0)]
    assert cursor == {"0o": 6, "1e": 3}  # the partial line waits
    more, cursor = console_log.read_console(files, cursor, 65536, done=True)
    assert [ln.text for ln in more] == ["a3 partial"] and cursor == {"0o": 16, "1e": 3}
    assert console_log.read_console(files, cursor, 65536, done=True)[0] == []
    # A restarted worker goes on from the sizes its marks recorded.
    assert console_log.MarkWriter(tmp_path, rescan_s=0.0)._sizes == {} and console_log._marked_size(out) == 6


def test_merge_orders_by_time_then_rank_then_stream() -> None:
    a = [ConsoleLine(1, "stdout", 5.0, "r1 late", 0), ConsoleLine(1, "stderr", 2.0, "r1 err", 0)]
    b = [
        ConsoleLine(0, "stderr", 2.0, "r0 err", 0),
        ConsoleLine(0, "stdout", 2.0, "r0 out", 9),
        ConsoleLine(0, "stdout", 2.0, "r0 first", 3),
    ]
    assert [ln.text for ln in console_log.merge([a, b])] == ["r0 first", "r0 out", "r0 err", "r1 err", "r1 late"]
    assert [ln.text for ln in console_log.matching(console_log.merge([a, b]), "ERR")] == ["r0 err", "r1 err"]


def test_a_first_read_starts_at_a_line_and_reads_within_its_budget(tmp_path: Path) -> None:
    log = tmp_path / "0" / "stdout.log"
    log.parent.mkdir()
    log.write_bytes(b"".join(f"line {i:05d}\n".encode() for i in range(10_000)))  # 110,000 bytes
    lines, cursor = console_log.read_console([LogFile(0, "stdout", log)], None, 4096, done=True)
    assert lines[-1].text == "line 09999" and all(ln.text.startswith("line ") for ln in lines)
    assert len(lines) <= 4096 // 11 and cursor == {"0o": 110_000}


@pytest.mark.parametrize(
    ("cursor", "parsed"), [("", {}), ("0o12.0e0.15o3", {"0o": 12, "0e": 0, "15o": 3}), ("0o1.", {"0o": 1})]
)
def test_cursors_round_trip(cursor: str, parsed: dict[str, int]) -> None:
    assert console_log.parse_cursor(cursor) == parsed
    assert console_log.parse_cursor(console_log.format_cursor(parsed)) == parsed


@pytest.mark.parametrize("bad", ["0x1", "o1", "0o-1", "0o1;rm", "99999o1", "0o" + "9" * 17])
def test_a_bad_cursor_says_what_to_pass(bad: str) -> None:
    with pytest.raises(ValueError, match="pass back the one a read returned"):
        console_log.parse_cursor(bad)


# --- step, views, SDK, headline ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("max_step", "step"),
    [({}, None), ({"sys/rss_mb_total": 1_700_000_000_000}, None), ({"train/loss": 70, "lr": 69, "sys/x": 10**12}, 70)],
)
def test_the_step_from_metrics_ignores_system_samples(max_step: dict[str, int], step: int | None) -> None:
    assert step_from_metrics(max_step) == step


def test_the_jobs_table_keeps_the_id_at_80_columns_and_scripts_say_not_reported() -> None:
    job = {"id": 12345, "name": "a-rather-long-job-name-indeed", "status": "running", "strategy": "DDP 4 × acc 2",
           "step": 123_456, "total_steps": 1_000_000, "latest_loss": 0.123,
           "created_at": "2026-11-25T20:00:00+00:00"}  # fmt: skip
    console = Console(width=80, record=True)
    console.print(views.jobs_table([job]))
    text = console.export_text()
    assert "12345" in text and "running" in text, text
    assert views.steps({"step": None, "spec": {"entrypoint": "train.py"}}) == "not reported"
    assert views.steps({"step": 0, "spec": {}}) == "0"
    assert views.console_line({"rank": 1, "stream": "stderr", "text": "x"}) == "[r1 err] x"


def test_the_sdk_notes_a_crash_but_not_an_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    from rankzero import _crash

    seen: list[type[BaseException]] = []
    monkeypatch.setattr(_crash, "_previous_excepthook", lambda kind, value, tb: seen.append(kind))
    monkeypatch.setattr(_crash, "_crashed", False)
    _crash._note_crash(SystemExit, SystemExit(75), None)
    assert not _crash.crashed()
    _crash._note_crash(NameError, NameError("x"), None)
    assert _crash.crashed() and seen == [SystemExit, NameError]
    monkeypatch.setattr(sys, "excepthook", sys.__excepthook__)
    _crash.watch_for_crash()
    _crash.watch_for_crash()  # once
    assert sys.excepthook is _crash._note_crash and _crash._previous_excepthook is sys.__excepthook__


def test_the_headline_is_the_exception_not_the_sdks_note() -> None:
    traceback = [
        "Traceback (most recent call last):",
        '  File "train.py", line 19, in <module>',
        "NameError: name 'undefined_batch' is not defined",
        "rankzero: exiting on an uncaught exception: the last 3 logged steps were not averaged (no wait)",
    ]
    assert _exception_line(traceback) == "NameError: name 'undefined_batch' is not defined"
