"""A job's links in its own run dir must not steer the worker, which works outside the sandbox as its own user
(root in a container). The job may write anything in its run dir, links included; each test plants what a
job's code could plant there (it needs nothing else) and calls the worker code that reads or writes that
file. Before core/run_files.py every one of them followed the link:

- `logs/attempt_1/.../stderr.log -> /proc/self/environ` (or the token file): a failed attempt's error message
  (errors.diagnose, shown to every user on the job page) carried the worker's environment or the API token;
- `console_series.tmp -> <data dir>/api_token`: the worker wrote `{"names": [...]}` (names from the job's
  console) over the token, a text the job knows, the admin's token after the next restart;
- `spec.json.tmp` and the launcher log of the next attempt: the same write, at a restart;
- the environment log: uv's output appended to any file;
- `events.jsonl -> /dev/zero` and friends: reads without end.
"""

from __future__ import annotations

import json
import os
import signal
import types
from pathlib import Path

import pytest

from core import run_files
from trainer.run_dir import RunDir
from worker import errors, sandbox
from worker.console_feed import ConsoleFeed, console_series
from worker.ingest_events import EventTail

SECRET = "the-worker-secret-0123456789abcdef"


@pytest.fixture
def run(tmp_path: Path) -> RunDir:
    run = RunDir(tmp_path / "runs" / "job_1")
    run.root.mkdir(parents=True)
    return run


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "data" / "api_token"
    path.parent.mkdir()
    path.write_text(SECRET + "\n")
    return path


def _rank_stderr(run: RunDir, attempt: int = 1) -> Path:
    folder = run.attempt_logs(attempt) / "run_abc" / "attempt_0" / "0"
    folder.mkdir(parents=True)
    return folder / "stderr.log"


def test_a_linked_rank_log_does_not_put_a_worker_file_in_the_jobs_error(run: RunDir, secret: Path) -> None:
    stderr = _rank_stderr(run)
    launcher_log = run.logs / "attempt_1.torchrun.log"
    launcher_log.write_text(
        "Root Cause (first observed failure):\n[0]:\n  rank      : 0 (local_rank: 0)\n  exitcode  : 1\n"
        "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n=========\n"
    )
    stderr.symlink_to(secret)
    failure = errors.diagnose(run, 1, launcher_log, 1)
    assert SECRET not in failure.text(), failure.text()


def test_a_linked_launcher_log_is_not_read_into_the_error(run: RunDir, secret: Path) -> None:
    """Without torchrun's summary the launcher log's tail is the error (a job may link it to any file: the
    token, or /proc/self/environ, which the worker would read as its own)."""
    launcher_log = run.logs / "attempt_1.torchrun.log"
    run.logs.mkdir()
    launcher_log.symlink_to(secret)
    failure = errors.diagnose(run, 1, launcher_log, 1)
    assert SECRET not in failure.text(), failure.text()


def test_a_linked_error_file_is_not_read(run: RunDir, secret: Path) -> None:
    secret.write_text(json.dumps({"message": SECRET}))
    launcher_log = run.logs / "attempt_1.torchrun.log"
    (_rank_stderr(run).parent / "error.json").symlink_to(secret)
    launcher_log.write_text("")
    assert SECRET not in errors.diagnose(run, 1, launcher_log, 1).text()


def test_console_series_are_not_written_through_a_link(run: RunDir, secret: Path) -> None:
    for name in ("console_series.tmp", "console_series.json.tmp"):
        (run.root / name).symlink_to(secret)
    feed = types.SimpleNamespace(series=set(), run=run, summary_written=None)
    ConsoleFeed._note_series(feed, {"loss"})  # pyright: ignore[reportArgumentType]  (only these attributes)
    assert secret.read_text() == SECRET + "\n"
    assert console_series(run) == ["loss"]  # still noted, in its own file


def test_console_series_linked_to_an_endless_file_is_not_read_whole(run: RunDir) -> None:
    run.console_series.symlink_to("/dev/zero")
    assert console_series(run) == []


def test_events_linked_elsewhere_are_not_read(run: RunDir, secret: Path) -> None:
    secret.write_text(json.dumps({"type": "progress", "step": 1}) + "\n")
    run.events.symlink_to(secret)
    tail = EventTail(run.events)
    assert tail.read() == []
    assert tail.offset == 0  # not a byte of it read


def test_the_environment_log_is_not_appended_through_a_link(api_settings, tmp_path: Path, secret: Path) -> None:
    from worker.environments import uv

    settings = api_settings(environment_dir=tmp_path / "environments")
    run = RunDir(settings.resolved_runs_dir / "job_7")
    log = run.environment_log(2)
    log.parent.mkdir(parents=True)
    log.symlink_to(secret)
    with pytest.raises(OSError):
        uv.run(["--version"], settings, log, lambda: None, tmp_path, 60)
    assert secret.read_text() == SECRET + "\n"


def test_run_files_refuses_a_linked_folder_on_the_way(run: RunDir, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (run.root / "logs").symlink_to(elsewhere)
    with pytest.raises(run_files.LinkRefused):
        run_files.open_file(run.logs / "attempt_2.torchrun.log", "ab", run.root)
    with pytest.raises(run_files.LinkRefused):
        run_files.make_dirs(run.logs / "attempt_2", run.root)
    with pytest.raises(run_files.LinkRefused):
        run_files.write_atomic(run.logs / "x.json", "{}", run.root)
    assert list(elsewhere.iterdir()) == []


def test_run_files_refuses_a_fifo(run: RunDir) -> None:
    os.mkfifo(run.root / "events.jsonl")  # opening it for reading would block the worker
    with pytest.raises(run_files.LinkRefused):
        run_files.read_text(run.events, run.root)


@pytest.mark.skipif(sandbox.probe() is not None, reason=f"no sandbox here: {sandbox.probe()}")
def test_a_restart_writes_neither_spec_nor_launcher_log_through_the_jobs_links(
    tmp_path: Path, secret: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a job plants before it fails, for its next attempt's launch (a restart, a requeue)."""
    from core.settings import Settings
    from worker.launch import launch

    monkeypatch.setenv("RANKZERO_TRAINER_MODULE", "tests.support.sandbox_job")
    monkeypatch.delenv("RANKZERO_SANDBOX", raising=False)
    settings = Settings(data_dir=tmp_path / "data", runs_dir=tmp_path / "runs", sandbox="on")  # pyright: ignore[reportCallIssue]
    run = RunDir(settings.resolved_runs_dir / "job_1")
    run.logs.mkdir(parents=True)
    (run.root / "probe.json").write_text(json.dumps({}))
    (run.root / "spec.json.tmp").symlink_to(secret)
    (run.logs / "attempt_2.torchrun.log").symlink_to(secret)
    with pytest.raises(OSError, match="not followed"):
        launched = launch(run, {"name": "probe"}, 1, 2, 1, None, settings)
        os.killpg(launched.proc.pid, signal.SIGKILL)  # only on the code before the fix
        launched.proc.wait(timeout=30)
    assert secret.read_text() == SECRET + "\n"


def test_a_linked_work_dir_gets_no_links_from_the_worker(run: RunDir, tmp_path: Path) -> None:
    """`work -> /etc/profile.d` (say) and a bundle holding `evil.sh`: the worker made /etc/profile.d/evil.sh, a
    link to the job's code that root's next login shell would run; a name there that is a link was removed."""
    from trainer.entrypoint import parse_entrypoint
    from worker.script_jobs import script_workdir

    code = tmp_path / "bundle"
    code.mkdir()
    (code / "train.py").write_text("print('hi')\n")
    (code / "evil.sh").write_text("echo owned\n")
    target = tmp_path / "profile.d"
    target.mkdir()
    (target / "train.py").symlink_to("/bin/true")  # a link of that name the worker would have replaced
    run.work.symlink_to(target)
    with pytest.raises(OSError, match="not followed"):
        script_workdir(run, parse_entrypoint("train.py"), code)
    assert sorted(p.name for p in target.iterdir()) == ["train.py"]
    assert os.readlink(target / "train.py") == "/bin/true"


def test_the_work_dir_still_links_the_bundle(run: RunDir, tmp_path: Path) -> None:
    from trainer.entrypoint import parse_entrypoint
    from worker.script_jobs import script_workdir

    code = tmp_path / "bundle"
    code.mkdir()
    (code / "train.py").write_text("print('hi')\n")
    (code / "data.csv").write_text("1\n")
    run.work.mkdir(parents=True)
    (run.work / "data.csv").write_text("the script's own\n")
    (run.work / "old").symlink_to(tmp_path)
    work = script_workdir(run, parse_entrypoint("train.py"), code)
    assert os.readlink(work / "train.py") == str(code / "train.py")
    assert (work / "data.csv").read_text() == "the script's own\n"  # the script's file is kept
    assert script_workdir(run, parse_entrypoint("train.py"), code) == work  # idempotent


def test_bwrap_binds_inputs_by_descriptor() -> None:
    view = sandbox.View(run_dir=Path("/r/job_2"), cwd=Path("/r/job_2"), input_fds=((7, Path("/r/job_1/c/s.pt")),))
    args = sandbox.bwrap_args(view)
    i = args.index("--ro-bind-fd")
    assert args[i : i + 3] == ["--ro-bind-fd", "7", "/r/job_1/c/s.pt"]


@pytest.mark.skipif(sandbox.probe() is not None, reason=f"no sandbox here: {sandbox.probe()}")
def test_a_resume_checkpoint_swapped_for_a_link_after_the_check_is_not_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Job 1 (running, its owner's) flips `work/` to a link to a folder of the host that holds a file of the
    checkpoint's name, between the worker's check of job 2's resume_from and bwrap's mount (the race at its
    worst moment, made certain here). Bound by path, job 2 read the host's file; bound by descriptor, the link
    is refused and nothing is shown."""
    from core.settings import Settings
    from worker import launch as launch_module
    from worker import launch_command

    monkeypatch.setenv("RANKZERO_TRAINER_MODULE", "tests.support.sandbox_job")
    monkeypatch.delenv("RANKZERO_SANDBOX", raising=False)
    settings = Settings(data_dir=tmp_path / "data", runs_dir=tmp_path / "runs", sandbox="on")  # pyright: ignore[reportCallIssue]
    other = settings.resolved_runs_dir / "job_1"
    (other / "work").mkdir(parents=True)
    checkpoint = other / "work" / "api_token"
    checkpoint.write_text("a checkpoint")
    host = tmp_path / "host-secrets"
    host.mkdir()
    (host / "api_token").write_text(SECRET)
    real = launch_module.resume_input
    calls: list[int] = []

    def checked_then_swapped(spec: dict, s: Settings) -> tuple[Path, ...]:
        found = real(spec, s)
        calls.append(1)
        if len(calls) == 2:  # asked once for the ranks' environment, then for the sandbox's view: swap after that
            (other / "work").rename(other / "work.real")
            (other / "work").symlink_to(host)
        return found

    monkeypatch.setattr(launch_module, "resume_input", checked_then_swapped)
    monkeypatch.setattr(launch_command, "resume_input", checked_then_swapped)  # job_env's own look-up
    run = RunDir(settings.resolved_runs_dir / "job_2")
    run.root.mkdir(parents=True)
    (run.root / "probe.json").write_text(json.dumps({"read": [str(checkpoint)]}))
    launched = launch_module.launch(run, {"name": "probe", "resume_from": str(checkpoint)}, 2, 1, 1, None, settings)
    try:
        assert launched.proc.wait(timeout=180) == 0, launched.launcher_log.read_text()
    finally:
        if launched.proc.poll() is None:
            os.killpg(launched.proc.pid, signal.SIGKILL)
    assert (other / "work").is_symlink()
    result = json.loads((run.root / "probe_rank0.json").read_text())
    assert result["read"][str(checkpoint)] != "read", "job 2 read the host's file through job 1's link"


def test_a_fifo_for_a_log_is_refused_not_opened(api_settings) -> None:
    """A job makes its rank's stderr.log a FIFO: each API read of its log blocked a threadpool thread for ever
    (open() waits for a writer); 40 of them froze every synchronous route, /api/health too (found live)."""
    from fastapi import HTTPException

    from api.routes.logs import _console_logs, _log_path

    settings = api_settings()
    run = RunDir(settings.resolved_runs_dir / "job_1")
    log = _rank_stderr(run)
    os.mkfifo(log)
    with pytest.raises(HTTPException) as refused:
        _log_path(run, 0, "stderr", 1, settings)
    assert refused.value.status_code == 404 and "not a regular file" in str(refused.value.detail)
    assert _console_logs(run, 1, settings)[0] == []  # the merged console leaves it out


def test_a_fifo_among_tensorboard_files_does_not_block_the_watcher(run: RunDir) -> None:
    from worker.tensorboard import TensorBoardTail

    run.tensorboard.mkdir()
    # Discovery skips what is not a file; the open refuses it too (swapped in after discovery, it would wait
    # for a writer).
    os.mkfifo(run.tensorboard / "events.out.tfevents.1.host")
    assert TensorBoardTail(run.tensorboard).read() == []


def test_a_final_checkpoint_named_outside_the_run_dir_is_not_hashed(run: RunDir, secret: Path) -> None:
    """The `checkpoint` event's path is the job's text: `checkpoints/../../../data/api_token` (or a FIFO,
    or /dev/zero through a link) was opened and hashed by the worker at the run's end."""
    from worker.run_record import _final_checkpoint_problem

    relative = os.path.relpath(secret, run.root)
    (run.root / "checkpoints").mkdir()
    os.mkfifo(run.root / "checkpoints" / "step_00000001.pt")
    for path, said in ((relative, "not a file of its run dir"), ("checkpoints/step_00000001.pt", "missing")):
        problem = _final_checkpoint_problem(run, [{"type": "checkpoint", "path": path, "sha256": "0" * 64}])
        assert problem is not None and said in problem, problem
