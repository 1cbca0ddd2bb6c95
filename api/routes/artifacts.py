"""The artifact store over REST: what workers without the API's runs dir upload, and fetch back.

- `GET /api/artifacts/storage`: the store's kind and place (a worker reads it; the Hosts page too).
- `POST /api/artifacts/jobs/{id}/files/{path}`: a whole file (a checkpoint once its atomic write is
  done, an output), the body streamed to a temp file, hashed as it arrives and kept only when it
  matches `X-Content-SHA256`; a checkpoint upload then applies the job's `keep_last` in the store.
- `POST /api/artifacts/jobs/{id}/append/{path}?offset=N`: a chunk of a growing file (a log,
  events.jsonl) at byte `offset`, checked by its sha256; idempotent (bytes the API has are skipped),
  409 with the size held when the chunk starts past it.
- `GET /api/artifacts/jobs/{id}/files/{path}`: a stored file (a job resumed on another host fetches
  its checkpoint and events this way), with its sha256 in `X-Content-SHA256`.

Writes need an admin's token (a worker's is the server's, which signs in as the first admin): a member
cannot overwrite another's checkpoints. Paths are checked by core/artifacts/keys.py (inside the run
dir's shipped areas); bodies bypass the 1 MiB request limit only for a caller with credentials
(api/limits.py STREAMED_BODY_PREFIXES).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path as FsPath
from typing import IO, Annotated, Any

import anyio
from fastapi import APIRouter, HTTPException, Path, Query, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from starlette.requests import ClientDisconnect

from api.deps import JobId, SessionDep, SettingsDep, Shipper, job_or_404
from api.models import ErrorDetail
from api.models_artifacts import AppendedLog, ArtifactStorage, StoredFile
from core import artifacts
from core.artifacts import keys, prune
from core.artifacts.disk import OffsetGap
from core.settings import Settings

router = APIRouter(tags=["artifacts"])
SHA_HEADER = "X-Content-SHA256"
MAX_APPEND_BYTES = 8 << 20
MIN_UPLOAD_BYTES_PER_S = 1 << 20  # a 10 GB checkpoint gets ~3 h; a trickle cannot hold a connection for ever
RelPath = Annotated[str, Path(max_length=keys.MAX_KEY_CHARS, description="Path inside the job's run dir.")]


def _relative(raw: str) -> str:
    try:
        return keys.shipped_path(raw)
    except keys.BadKey as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from None


def _want_sha(request: Request) -> str:
    want = request.headers.get(SHA_HEADER, "").strip().lower()
    if len(want) != 64 or any(c not in "0123456789abcdef" for c in want):
        raise HTTPException(status.HTTP_400_BAD_REQUEST, f"send the body's sha256 (64 hex digits) in {SHA_HEADER}")
    return want


async def _receive(request: Request, tmp: FsPath, limit: int, settings: Settings) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    try:
        with anyio.fail_after(settings.body_timeout_s + limit / MIN_UPLOAD_BYTES_PER_S):
            with open(tmp, "wb") as out:
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > limit:
                        too_big = f"larger than {limit:,} bytes (RANKZERO_ARTIFACT_MAX_FILE_BYTES)"
                        raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, too_big)
                    digest.update(chunk)
                    out.write(chunk)
    except TimeoutError:
        raise HTTPException(status.HTTP_408_REQUEST_TIMEOUT, "the upload did not arrive in time; retry") from None
    except ClientDisconnect:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, "the upload was cut off; retry") from None
    return digest.hexdigest(), size


@router.get("/artifacts/storage", response_model=ArtifactStorage)
def storage(settings: SettingsDep) -> ArtifactStorage:
    store = artifacts.open_store(settings)
    return ArtifactStorage(kind=store.kind, where=store.where)  # type: ignore[arg-type]


@router.post(
    "/artifacts/jobs/{job_id}/files/{path:path}",
    response_model=StoredFile,
    responses={400: {"model": ErrorDetail}, 404: {"model": ErrorDetail}, 413: {"model": ErrorDetail}},
)
async def upload_file(
    job_id: JobId, path: RelPath, request: Request, session: SessionDep, settings: SettingsDep, _: Shipper
) -> StoredFile:
    """Keep a whole file of job `job_id` once its bytes match `X-Content-SHA256` (replacing any earlier copy)."""
    relative = _relative(path)
    want = _want_sha(request)
    job = job_or_404(session, job_id)
    incoming = artifacts.log_store(settings).incoming()
    tmp = incoming / f"{secrets.token_hex(8)}.part"
    try:
        got, size = await _receive(request, tmp, settings.artifact_max_file_bytes, settings)
        if got != want:
            why = f"the body's sha256 is {got}, not the {want} sent in {SHA_HEADER}: resend it"
            raise HTTPException(status.HTTP_400_BAD_REQUEST, why)
        key = keys.job_key(job_id, relative)
        store = artifacts.store_for(settings, relative)
        try:
            await run_in_threadpool(store.put, key, tmp, got)
        except artifacts.StoreUnavailable as exc:
            raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(exc)) from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    if relative.startswith("checkpoints/"):
        keep_last = int(((job.spec or {}).get("checkpoint") or {}).get("keep_last") or 3)
        await run_in_threadpool(_prune, settings, job_id, keep_last)
    return StoredFile(path=relative, bytes=size, sha256=got)


def _prune(settings: Settings, job_id: int, keep_last: int) -> None:
    """keep_last in the back-end that holds checkpoints (the worker's own copies are its trainer's business)."""
    store = artifacts.open_store(settings)
    stored = [e.key for e in store.list(keys.job_prefix(job_id) + "checkpoints/", 100_000)]
    for key in prune.to_prune(stored, keep_last):
        store.delete(key)


@router.post(
    "/artifacts/jobs/{job_id}/append/{path:path}",
    response_model=AppendedLog,
    responses={400: {"model": ErrorDetail}, 409: {"model": ErrorDetail}},
)
async def append(
    job_id: JobId,
    path: RelPath,
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    _: Shipper,
    offset: Annotated[int, Query(ge=0, le=2**53, description="Where the chunk starts in the file.")],
) -> AppendedLog:
    """Append a chunk of a growing file at `offset` (bytes the API already holds are skipped)."""
    relative = _relative(path)
    if relative.startswith(artifacts.BACKEND_AREAS):
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, "checkpoints and outputs are uploaded whole")
    want = _want_sha(request)
    job_or_404(session, job_id)
    data = b""
    try:
        with anyio.fail_after(settings.body_timeout_s):
            async for chunk in request.stream():
                data += chunk
                if len(data) > MAX_APPEND_BYTES:
                    raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, f"send at most {MAX_APPEND_BYTES} bytes")
    except (TimeoutError, ClientDisconnect):
        raise HTTPException(status.HTTP_408_REQUEST_TIMEOUT, "the chunk did not arrive whole; resend it") from None
    if hashlib.sha256(data).hexdigest() != want:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, f"the chunk does not match its {SHA_HEADER}: resend it")
    try:
        size = await run_in_threadpool(
            artifacts.log_store(settings).append, keys.job_key(job_id, relative), offset, data
        )
    except OffsetGap as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc), headers={"X-Stored-Size": str(exc.size)}) from None
    return AppendedLog(path=relative, size=size)


@router.get(
    "/artifacts/jobs/{job_id}/files/{path:path}",
    response_class=StreamingResponse,
    responses={200: {"content": {"application/octet-stream": {}}}, 404: {"model": ErrorDetail}},
)
def fetch_file(job_id: JobId, path: RelPath, session: SessionDep, settings: SettingsDep) -> StreamingResponse:
    """A stored file of job `job_id` (the API's runs dir first, then the configured store)."""
    relative = _relative(path)
    job_or_404(session, job_id)
    return stream_artifact(settings, keys.job_key(job_id, relative), FsPath(relative).name)


def stream_artifact(settings: Settings, key: str, filename: str) -> StreamingResponse:
    """A stored file as a download, its sha256 (when known) in X-Content-SHA256; 404 when no store has it."""
    found = artifacts.find(settings, key)
    if found is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no file {key} in the runs dir or the artifact store")
    store, entry = found
    headers = {
        "Content-Length": str(entry.size),
        "Content-Disposition": f'attachment; filename="{_safe_name(filename)}"',
        "X-Content-Type-Options": "nosniff",
        "Cache-Control": "no-store",
    }
    if entry.sha256:
        headers[SHA_HEADER] = entry.sha256
    return StreamingResponse(store.read(key), media_type="application/octet-stream", headers=headers)


def stream_open_file(fh: IO[Any], filename: str, media_type: str, headers: dict[str, str]) -> StreamingResponse:
    """A file already opened (core/paths.py `open_in_runs_dir`: no link followed, not a FIFO) as a download of
    the bytes it holds now (a log that grows meanwhile is cut there, to match Content-Length); closed at the end.
    Unlike FileResponse, nothing reopens it by path (the job could have swapped a link in)."""
    size = os.fstat(fh.fileno()).st_size

    def body() -> Iterator[bytes]:
        with fh:
            left = size
            while left > 0 and (chunk := fh.read(min(left, 1 << 20))):
                left -= len(chunk)
                yield chunk

    headers = {
        **headers,
        "Content-Length": str(size),
        "Content-Disposition": f'attachment; filename="{_safe_name(filename)}"',
    }
    return StreamingResponse(body(), media_type=media_type, headers=headers)


def _safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-+" else "_" for c in name)[:200] or "file"
