"""The merged console shows uv's output while node 0's worker prepared a job's own packages (issue 28: "its
output streamed to the console"), before the ranks' lines, as `[env]` lines in the CLI and on the page."""

from __future__ import annotations

import os
import time
from pathlib import Path

from api.routes.logs import _console_logs, _public_stream
from cli import views
from core import console_log
from core.settings import Settings
from trainer.run_dir import RunDir


def _run(tmp_path: Path) -> tuple[RunDir, Settings]:
    settings = Settings(data_dir=tmp_path / "data", runs_dir=tmp_path / "runs")  # pyright: ignore[reportCallIssue]
    run = RunDir(settings.resolved_runs_dir / "job_7")
    (run.attempt_logs(2) / "0").mkdir(parents=True)
    return run, settings


def test_the_build_comes_first_then_the_ranks_and_a_follow_reads_on(tmp_path: Path) -> None:
    run, settings = _run(tmp_path)
    built = time.time() - 30
    run.environment_log(1).write_text("$ uv pip install (attempt 1's build)\n")
    run.environment_log(2).write_text("$ uv pip install -r requirements.txt\nInstalled 1 package in 12ms\n")
    os.utime(run.environment_log(2), (built, built))
    run.environment_log(2, node_rank=1).write_text("node 1's own copy: not merged\n")
    out = run.attempt_logs(2) / "0" / "stdout.log"
    out.write_text("step 1\n")
    (out.with_name("stdout.marks")).write_bytes(console_log.encode_mark(7, built + 5))

    logs, ranks, more = _console_logs(run, None, settings, newest_attempt=2)
    assert ranks == [0] and not more
    lines, cursor = console_log.read_console(logs, None, 65536, done=False)
    assert [(ln.stream, ln.text) for ln in lines] == [
        ("environment", "$ uv pip install -r requirements.txt"),
        ("environment", "Installed 1 package in 12ms"),
        ("stdout", "step 1"),
    ]
    assert "0p" in cursor  # the build log has its own place in the cursor, which round-trips
    assert console_log.parse_cursor(console_log.format_cursor(cursor)) == cursor

    with open(run.environment_log(2), "a") as fh:  # a follow reads on from the cursor, each source from its own
        fh.write("Prepared 1 package\n")
    more_lines, _ = console_log.read_console(logs, cursor, 65536, done=True)
    assert [ln.text for ln in more_lines] == ["Prepared 1 package"]

    first, _, _ = _console_logs(run, 1, settings, newest_attempt=2)  # an earlier attempt: its own build
    assert [f.path.name for f in first if f.stream == console_log.ENVIRONMENT] == ["attempt_1.environment.log"]


def test_a_job_without_its_own_packages_has_no_build_in_its_console(tmp_path: Path) -> None:
    run, settings = _run(tmp_path)
    (run.attempt_logs(2) / "0" / "stdout.log").write_text("hello\n")
    logs, _, _ = _console_logs(run, None, settings, newest_attempt=2)
    assert [f.stream for f in logs] == ["stdout"]


def test_the_build_reads_as_env_in_the_cli_and_the_rest_api() -> None:
    assert _public_stream(console_log.ENVIRONMENT) == "environment"
    assert views.console_line({"rank": 0, "stream": "environment", "text": "Resolved 3 packages"}) == (
        "[env] Resolved 3 packages"
    )
    assert views.console_line({"rank": 0, "stream": "stdout", "text": "x"}) == "[r0] x"
