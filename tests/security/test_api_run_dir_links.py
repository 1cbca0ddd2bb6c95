"""A job's links and FIFOs in its own run dir must not steer the API (or the trainer's RunDir helpers the API
and the worker call), which read that run dir as the service. Each test plants what a job's code could plant
there (it writes its run dir from inside the sandbox) and calls the code that serves or reads that file.
Before core/run_files.py was used there:

- `logs/attempt_99.environment.log -> <data dir>/api_token`: GET /jobs/{id}/environment put the token in
  `log_tail`;
- `spec.json` / `console_series.json` -> /dev/zero, a FIFO or a file outside: read whole (memory without end,
  a thread blocked for ever) or read through the link;
- every route that serves a run-dir file checked the path (core/paths.py `inside_runs_dir`), then opened it by
  path: a link or FIFO the job swapped in between was read (the token) or blocked a thread.

A FIFO that blocked a reader would hang the test: `_blocks` runs the read in a thread and, if it is still
waiting, opens the FIFO's other end to release it, then fails.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi import HTTPException

from core.artifacts.base import ArtifactMissing
from core.artifacts.disk import DiskStore
from core.settings import Settings
from core.tables import Checkpoint, Job
from trainer.run_dir import RunDir

SECRET = "the-api-secret-0123456789abcdef"


@pytest.fixture
def settings(api_settings: Callable[..., Settings]) -> Settings:
    return api_settings()


@pytest.fixture
def run(settings: Settings) -> RunDir:
    run = RunDir(settings.resolved_runs_dir / "job_1")
    (run.root / "logs").mkdir(parents=True)
    return run


@pytest.fixture
def secret(settings: Settings) -> Path:
    path = settings.data_dir / "api_token_like"
    path.write_text(SECRET + "\n")
    return path


def _job(**fields: Any) -> Job:
    return Job(id=1, name="j", spec=fields.pop("spec", {"entrypoint": "train.py"}), **fields)


class _Session:
    """What the routes ask of a session here: `get` by id."""

    def __init__(self, *rows: Any) -> None:
        self.rows = rows

    def get(self, table: type, ident: int) -> Any:
        return next((r for r in self.rows if isinstance(r, table) and r.id == ident), None)


def _blocks(read: Callable[[], Any], fifo: Path) -> bool:
    """Whether `read` waited on `fifo` (released then, so the test ends either way)."""
    done = threading.Event()

    def target() -> None:
        try:
            read()
        except BaseException:  # the outcome is checked by the caller; only blocking matters here
            pass
        finally:
            done.set()

    threading.Thread(target=target, daemon=True).start()
    if done.wait(30):
        return False
    fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # a reader waits: this releases it (EOF on close)
    os.close(fd)
    done.wait(30)
    return True


def _body(response: Any) -> bytes:
    """A streamed response's body, as the server would send it."""

    async def collect() -> bytes:
        return b"".join([chunk async for chunk in response.body_iterator])

    # In a thread of its own: an earlier test in this (xdist worker) process may have left an event loop
    # marked running in the main thread, and asyncio.run refuses to start under one.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, collect()).result()


# --- 1. the environment log's tail -----------------------------------------------------------------------


def test_the_environment_log_tail_does_not_follow_a_link_to_the_token(run: RunDir, secret: Path) -> None:
    from api.routes.environments import _log_tail

    (run.logs / "attempt_1.environment.log").write_text("uv resolved 3 packages\n")
    (run.logs / "attempt_99.environment.log").symlink_to(secret)
    try:
        tail = _log_tail(run.root)
    except OSError:
        tail = ""  # what the route answers (log_tail "")
    assert SECRET not in tail


def test_the_environment_log_tail_is_still_read(run: RunDir) -> None:
    from api.routes.environments import LOG_TAIL_BYTES, _log_tail

    (run.logs / "attempt_2.environment.log").write_text("x" * (2 * LOG_TAIL_BYTES) + "Resolved 3 packages\n")
    tail = _log_tail(run.root)
    assert tail.endswith("Resolved 3 packages\n") and len(tail) == LOG_TAIL_BYTES


def test_the_environment_log_tail_does_not_wait_on_a_fifo(run: RunDir) -> None:
    from api.routes.environments import _log_tail

    fifo = run.logs / "attempt_3.environment.log"
    os.mkfifo(fifo)
    assert not _blocks(lambda: _log_tail(run.root), fifo)


# --- 2. spec.json, read by RunDir.rank_logs (API /logs and /console, worker diagnose) ---------------------


def test_spec_json_linked_outside_is_not_read(run: RunDir, secret: Path) -> None:
    secret.write_text(json.dumps({"nproc": 4}))
    run.spec.symlink_to(secret)
    assert run._ranks_per_node() == 1  # the link's target said 4


def test_spec_json_is_read_bounded(run: RunDir) -> None:
    """A spec.json past the bound is not read whole (a link to /dev/zero would grow the reader without end)."""
    from trainer.run_dir import SPEC_MAX_BYTES

    run.spec.write_text(json.dumps({"nproc": 4, "pad": "x" * SPEC_MAX_BYTES}))
    assert run._ranks_per_node() == 1
    run.spec.write_text(json.dumps({"nproc": 4}))
    assert run._ranks_per_node() == 4


def test_spec_json_as_a_fifo_does_not_block_rank_logs(run: RunDir) -> None:
    os.mkfifo(run.spec)
    assert not _blocks(lambda: run.rank_logs("stderr"), run.spec)


# --- 3. console_series.json, read by GET /jobs/{id}/metrics -----------------------------------------------


def test_console_series_linked_outside_is_not_read(run: RunDir, settings: Settings, secret: Path) -> None:
    from api.routes.metrics import _console_names

    secret.write_text(json.dumps({"names": [SECRET]}))
    run.console_series.symlink_to(secret)
    assert _console_names(_job(), settings) == set()


def test_console_series_as_a_fifo_does_not_block_the_metrics_route(run: RunDir, settings: Settings) -> None:
    from api.routes.metrics import _console_names

    os.mkfifo(run.console_series)
    assert not _blocks(lambda: _console_names(_job(), settings), run.console_series)


def test_console_series_is_still_read(run: RunDir, settings: Settings) -> None:
    from api.routes.metrics import _console_names

    run.console_series.write_text(json.dumps({"names": ["loss", 3]}))
    assert _console_names(_job(), settings) == {"loss"}


# --- 4. a link or FIFO swapped in after the route's check -------------------------------------------------


def _rank_log(run: RunDir) -> Path:
    folder = run.attempt_logs(1) / "r" / "attempt_0" / "0"
    folder.mkdir(parents=True)
    return folder / "stderr.log"


@pytest.fixture
def check_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    """`inside_runs_dir` answers as it did just before the job swapped its file (the race's window)."""
    import api.routes.checkpoints
    import api.routes.logs

    def passed(raw: Any, runs_dir: Path, *, base: Path | None = None) -> Path:
        return (base or runs_dir) / raw

    monkeypatch.setattr(api.routes.logs, "inside_runs_dir", passed)
    monkeypatch.setattr(api.routes.checkpoints, "inside_runs_dir", passed)


@pytest.mark.usefixtures("check_passes")
def test_a_log_swapped_for_a_link_after_the_check_is_not_served(run: RunDir, settings: Settings, secret: Path) -> None:
    from api.routes.logs import download_log, get_logs

    _rank_log(run).symlink_to(secret)
    session: Any = _Session(_job())
    for read in (
        lambda: get_logs(1, session, settings, rank=0, stream="stderr", offset=0, tail=None, limit=4096, attempt=None),
        lambda: _body(download_log(1, session, settings, rank=0, stream="stderr", attempt=None)),
    ):
        with pytest.raises(HTTPException) as refused:
            read()
        assert refused.value.status_code == 404 and SECRET not in str(refused.value.detail)


@pytest.mark.usefixtures("check_passes")
def test_a_log_swapped_for_a_fifo_after_the_check_blocks_no_thread(run: RunDir, settings: Settings) -> None:
    from api.routes.logs import download_log, get_logs

    log = _rank_log(run)
    os.mkfifo(log)
    session: Any = _Session(_job())
    assert not _blocks(
        lambda: get_logs(1, session, settings, rank=0, stream="stderr", offset=0, tail=None, limit=4096, attempt=None),
        log,
    )
    assert not _blocks(lambda: download_log(1, session, settings, rank=0, stream="stderr", attempt=None), log)


def test_the_console_opens_no_link_below_the_runs_dir(run: RunDir, settings: Settings, secret: Path) -> None:
    """The merged console reads each log it was given through core/run_files.py (a log checked, then swapped)."""
    from core import console_log

    log = _rank_log(run)
    log.symlink_to(secret)
    os.symlink(secret, console_log.marks_path(log))
    given = console_log.LogFile(0, "stderr", log, settings.resolved_runs_dir)
    lines, _ = console_log.read_console([given], None, 4096, done=True)
    assert lines == []


def test_the_console_does_not_wait_on_a_fifo(run: RunDir, settings: Settings) -> None:
    from core import console_log

    log = _rank_log(run)
    os.mkfifo(log)
    given = console_log.LogFile(0, "stderr", log, settings.resolved_runs_dir)
    assert not _blocks(lambda: console_log.read_console([given], None, 4096, done=True), log)


def test_the_worker_appends_no_mark_through_a_link(run: RunDir, secret: Path) -> None:
    """The worker's marks (`stdout.marks` beside each log) were appended by path: a job's link made it append
    to any file, as the worker (root in a container)."""
    from core import console_log

    log = _rank_log(run)
    log.write_text("hello\n")
    os.symlink(secret, console_log.marks_path(log))
    console_log.MarkWriter(run.attempt_logs(1)).note(1000.0, final=True)
    assert secret.read_text() == SECRET + "\n"


@pytest.mark.usefixtures("check_passes")
def test_a_checkpoint_swapped_for_a_link_after_the_check_is_not_served(
    run: RunDir, settings: Settings, secret: Path
) -> None:
    from api.routes.checkpoints import download_checkpoint

    (run.root / "checkpoints").mkdir()
    (run.root / "checkpoints" / "step_00000001.pt").symlink_to(secret)
    row = Checkpoint(id=7, job_id=1, step=1, path="checkpoints/step_00000001.pt", bytes=1, sha256="0" * 64)
    session: Any = _Session(_job(), row)
    with pytest.raises(HTTPException) as refused:
        _body(download_checkpoint(7, session, settings))
    assert refused.value.status_code == 404


def test_a_checkpoint_on_disk_is_still_served(run: RunDir, settings: Settings) -> None:
    from api.routes.checkpoints import download_checkpoint

    (run.root / "checkpoints").mkdir()
    (run.root / "checkpoints" / "step_00000001.pt").write_bytes(b"weights")
    row = Checkpoint(id=7, job_id=1, step=1, path="checkpoints/step_00000001.pt", bytes=7, sha256="0" * 64)
    response = download_checkpoint(7, _Session(_job(), row), settings)  # type: ignore[arg-type]
    assert _body(response) == b"weights" and response.headers["content-length"] == "7"
    assert "job1_step_00000001.pt" in response.headers["content-disposition"]


def test_an_output_swapped_for_a_link_after_the_listing_is_not_read(settings: Settings, secret: Path) -> None:
    """Outputs and artifact downloads read through the disk store: it lists no link (lstat), but read by path
    what was swapped in after."""
    work = settings.resolved_runs_dir / "job_1" / "work"
    work.mkdir(parents=True)
    (work / "out.txt").symlink_to(secret)
    os.mkfifo(work / "pipe.txt")
    store = DiskStore(settings.resolved_runs_dir)
    with pytest.raises(ArtifactMissing):
        b"".join(store.read("job_1/work/out.txt"))
    assert not _blocks(lambda: b"".join(store.read("job_1/work/pipe.txt")), work / "pipe.txt")


def test_a_rank_log_is_served_over_http_and_a_linked_one_refused(server: Any, secret: Path) -> None:
    """`/logs/download` streams the descriptor it opened (no FileResponse reopening the path), whole; a link the
    job left is a 404 that says why, without the target's bytes."""
    import httpx

    from tests.support.jobs import DIGITS_SPEC

    auth = server.auth
    r = httpx.post(f"{server.base}/api/jobs", json={**DIGITS_SPEC, "name": "logs"}, headers=auth, timeout=30)
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    run = RunDir(server.settings.resolved_runs_dir / f"job_{job_id}")
    log = run.attempt_logs(1) / "r" / "attempt_0" / "0" / "stderr.log"
    log.parent.mkdir(parents=True)
    log.write_bytes(b"line 1\n" * 50_000)
    got = httpx.get(f"{server.base}/api/jobs/{job_id}/logs/download", headers=auth, timeout=30)
    assert got.status_code == 200 and got.content == log.read_bytes()
    assert got.headers["content-length"] == str(log.stat().st_size)
    assert f"job_{job_id}_rank0_stderr.log" in got.headers["content-disposition"]
    log.unlink()
    log.symlink_to(secret)
    for path in ("logs/download", "logs"):
        refused = httpx.get(f"{server.base}/api/jobs/{job_id}/{path}", headers=auth, timeout=30)
        assert refused.status_code == 404 and SECRET not in refused.text, refused.text
