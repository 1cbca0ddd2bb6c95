"""A job's console: every rank's stdout and stderr merged in time order (`/console`, the default view of
the page and `rankzero logs`), and each rank's stream on its own (torchrun's --log-dir), read by byte
offset or tail."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import IO, Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query, status
from fastapi.responses import StreamingResponse

from api.deps import JobId, SessionDep, SettingsDep, job_or_404
from api.models import ConsoleChunk, ConsoleLinePublic, ErrorDetail, LogChunk
from api.routes.artifacts import stream_open_file
from core import console_log
from core.job_state import TERMINAL
from core.paths import UnsafePath, inside_runs_dir, open_in_runs_dir, run_dir_of
from trainer.run_dir import RunDir

router = APIRouter(tags=["logs"])
MAX_CHUNK_BYTES = 256 * 1024


def _ranks(run: RunDir, stream: str, attempt: int | None) -> list[int]:
    """Global ranks with a log (a multi-node job's other nodes too: trainer/run_dir.py `rank_logs`)."""
    base = run.attempt_logs(attempt) if attempt is not None else run.logs
    if not base.is_dir():
        return []
    return sorted(run.rank_logs(stream, attempt))


def _run_of(job_id: int, session, settings) -> RunDir:
    job = job_or_404(session, job_id)
    try:
        return RunDir(run_dir_of(job, settings))
    except UnsafePath as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"job {job_id} has no readable run dir: {exc}") from None


def _log_path(run: RunDir, rank: int, stream: str, attempt: int | None, settings) -> Path | None:
    path = run.rank_log(rank, stream, attempt) if run.logs.is_dir() else None
    if path is None:
        return None
    try:
        return inside_runs_dir(path, settings.resolved_runs_dir)  # a symlinked log must not leave the runs dir
    except UnsafePath as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"log refused: {exc}") from None


def _open_log(path: Path, settings) -> IO[Any]:
    """The checked log, opened with no link followed and not blocking (the job may have swapped a link or FIFO in
    since the check): 404 saying why otherwise."""
    try:
        return open_in_runs_dir(path, settings.resolved_runs_dir)
    except UnsafePath as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"log refused: {exc}") from None
    except FileNotFoundError:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"log {path.name} is gone (removed while being read)") from None


def _console_logs(
    run: RunDir, attempt: int | None, settings, newest_attempt: int = 0
) -> tuple[list[console_log.LogFile], list[int], bool]:
    """The logs merged (each confined to the runs dir), the ranks they belong to, and whether some were left out.
    Node 0's environment log of the attempt (`attempt`, else the newest) comes first: uv's output while the
    worker prepared the job's own packages, shown as rank 0's."""
    if not run.logs.is_dir():
        return [], [], False
    found: list[console_log.LogFile] = []
    root = settings.resolved_runs_dir  # each log is opened from here with no link followed (core/console_log.py)
    environment = run.environment_log(attempt if attempt is not None else newest_attempt)
    if environment.is_file():
        with contextlib.suppress(UnsafePath):  # a symlinked log that leaves the runs dir is not read
            confined = inside_runs_dir(environment, settings.resolved_runs_dir)
            found.append(console_log.LogFile(0, console_log.ENVIRONMENT, confined, root))
    for stream in console_log.STREAMS:
        for rank, path in run.rank_logs(stream, attempt).items():
            try:
                found.append(console_log.LogFile(rank, stream, inside_runs_dir(path, root), root))
            except UnsafePath:
                continue  # a symlinked log that leaves the runs dir is not read
    found.sort(key=lambda f: (f.rank, f.stream))
    kept = found[: console_log.MAX_FILES]
    return kept, sorted({f.rank for f in kept}), len(found) > len(kept)


@router.get(
    "/jobs/{job_id}/console",
    response_model=ConsoleChunk,
    responses={404: {"model": ErrorDetail}, 422: {"model": ErrorDetail}},
)
def get_console(  # noqa: PLR0913 (one parameter per query field)
    job_id: JobId,
    session: SessionDep,
    settings: SettingsDep,
    cursor: Annotated[
        str | None,
        Query(max_length=console_log.MAX_CURSOR_CHARS, description="The cursor of the previous read (follow)."),
    ] = None,
    limit: Annotated[
        int, Query(ge=4096, le=4 * MAX_CHUNK_BYTES, description="Most log bytes read, over all the files.")
    ] = 4 * 65536,
    q: Annotated[str, Query(max_length=200, description="Only lines containing this (case-insensitive).")] = "",
    attempt: Annotated[
        int | None, Query(ge=0, le=10_000, description="This attempt's logs (default: the newest of each rank).")
    ] = None,
) -> ConsoleChunk:
    """All ranks' stdout and stderr merged in time order (the newest `limit` bytes, or on from `cursor`).
    The cost is bounded by `limit` and the number of logs (at most MAX_FILES are merged)."""
    job = job_or_404(session, job_id)
    run = _run_of(job_id, session, settings)
    try:
        offsets = console_log.parse_cursor(cursor) if cursor is not None else None
    except ValueError as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from None
    logs, ranks, more = _console_logs(run, attempt, settings, newest_attempt=job.attempt or 0)
    lines, after = console_log.read_console(logs, offsets, limit, done=job.status in TERMINAL)
    return ConsoleChunk(
        lines=[
            ConsoleLinePublic(rank=ln.rank, stream=_public_stream(ln.stream), time=ln.time, text=ln.text)
            for ln in console_log.matching(lines, q)
        ],
        cursor=console_log.format_cursor(after),
        ranks=ranks,
        more_ranks=more,
    )


def _public_stream(stream: str) -> Literal["stdout", "stderr", "environment"]:
    return "stderr" if stream == "stderr" else "environment" if stream == console_log.ENVIRONMENT else "stdout"


@router.get("/jobs/{job_id}/logs", response_model=LogChunk, responses={404: {"model": ErrorDetail}})
def get_logs(  # noqa: PLR0913 (one parameter per query field)
    job_id: JobId,
    session: SessionDep,
    settings: SettingsDep,
    rank: Annotated[int, Query(ge=0, le=4095)] = 0,
    stream: Literal["stdout", "stderr"] = "stderr",
    offset: Annotated[
        int, Query(ge=0, le=2**53, description="Byte offset to read from (the previous next_offset).")
    ] = 0,
    tail: Annotated[
        int | None, Query(ge=1, le=MAX_CHUNK_BYTES, description="Read only the last N bytes (ignores offset).")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_CHUNK_BYTES, description="Most bytes to return.")] = 65536,
    attempt: Annotated[
        int | None, Query(ge=0, le=10_000, description="Read this attempt's logs (default: the newest log).")
    ] = None,
) -> LogChunk:
    run = _run_of(job_id, session, settings)
    ranks = _ranks(run, stream, attempt)
    path = _log_path(run, rank, stream, attempt, settings)
    if path is None:
        return LogChunk(rank=rank, stream=stream, ranks=ranks, offset=offset, next_offset=offset, text="")
    with _open_log(path, settings) as fh:
        size = fh.seek(0, 2)
        start = max(0, size - tail) if tail is not None else min(offset, size)
        fh.seek(start)
        data = fh.read(min(limit, size - start))
    return LogChunk(
        rank=rank,
        stream=stream,
        ranks=ranks,
        offset=start,
        next_offset=start + len(data),
        text=data.decode("utf-8", errors="replace"),
    )


@router.get(
    "/jobs/{job_id}/logs/download",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/plain": {}}, "description": "The whole log"}, 404: {"model": ErrorDetail}},
)
def download_log(
    job_id: JobId,
    session: SessionDep,
    settings: SettingsDep,
    rank: Annotated[int, Query(ge=0, le=4095)] = 0,
    stream: Literal["stdout", "stderr"] = "stderr",
    attempt: Annotated[int | None, Query(ge=0, le=10_000, description="This attempt's log (default: newest).")] = None,
) -> StreamingResponse:
    """One rank's whole stdout or stderr log as a file (`job_<id>_rank<r>_<stream>.log`)."""
    path = _log_path(_run_of(job_id, session, settings), rank, stream, attempt, settings)
    if path is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"job {job_id} has no {stream} log for rank {rank}")
    suffix = f"_attempt{attempt}" if attempt is not None else ""
    return stream_open_file(
        _open_log(path, settings),
        f"job_{job_id}_rank{rank}_{stream}{suffix}.log",
        "text/plain; charset=utf-8",
        {"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"},
    )
