"""A job's outputs: every file it wrote under its work dir (or the spec's `outputs` globs), with size and
sha256, downloadable one by one or a folder at a time as a tar or zip archive streamed as it is made.

The files are read where they are: the API's runs dir (a host that shares it, or the disk store), else
the configured artifact store (a host that uploads; core/artifacts). Links (a script job's work dir
links its bundle's files) are never outputs. Listing is bounded by RANKZERO_OUTPUTS_MAX_FILES and an
archive by RANKZERO_OUTPUTS_MAX_ARCHIVE_BYTES, both checked before a byte is sent.
"""

from __future__ import annotations

import fnmatch
import queue
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query, status
from fastapi.responses import StreamingResponse

from api.deps import JobId, SessionDep, SettingsDep, job_or_404
from api.models import ErrorDetail
from api.models_artifacts import OutputFile, OutputList
from api.routes.artifacts import stream_artifact
from core import artifacts
from core.artifacts import keys
from core.artifacts.base import CHUNK
from core.settings import Settings

router = APIRouter(tags=["outputs"])
WORK = "work/"
QUEUED_CHUNKS = 8  # an archive in flight holds at most this many 1 MiB chunks in memory
PathQuery = Annotated[str, Query(min_length=1, max_length=keys.MAX_KEY_CHARS, description="Path in the work dir.")]


def selected(path: str, patterns: list[str]) -> bool:
    """Whether the output `path` (relative to the work dir) is one the spec's `outputs` globs name (pure)."""
    return not patterns or any(fnmatch.fnmatchcase(path, p) for p in patterns)


def _patterns(job: Any) -> list[str]:
    return [str(p) for p in ((job.spec or {}).get("outputs") or [])]


def _entries(settings: Settings, job_id: int, limit: int) -> dict[str, artifacts.Entry]:
    """path in the work dir → entry, from the runs dir and the store (the runs dir's copy wins)."""
    prefix = keys.job_prefix(job_id) + WORK
    found: dict[str, artifacts.Entry] = {}
    local = artifacts.log_store(settings)
    backend = artifacts.open_store(settings)
    for store in (backend, local) if backend.kind != local.kind else (local,):
        for entry in store.list(prefix, limit + 1):
            found[entry.key[len(prefix) :]] = entry
    return found


def output_files(settings: Settings, job: Any) -> tuple[list[OutputFile], bool]:
    assert job.id is not None
    limit = settings.outputs_max_files
    entries = _entries(settings, job.id, limit)
    patterns = _patterns(job)
    paths = sorted(p for p in entries if selected(p, patterns))
    files = []
    for path in paths[:limit]:
        shown = escaped(path)
        try:
            found = artifacts.find(settings, entries[path].key) if shown == path else None
        except keys.BadKey:
            found = None
        if shown != path or found is None and _bad_key(entries[path].key):
            # a control character or undecodable bytes in the name (issue 37: a 500 before): listed escaped, not served
            entry = entries[path]
            files.append(OutputFile(path=shown, bytes=entry.size, sha256=entry.sha256, downloadable=False))
            continue
        if found is not None:
            files.append(OutputFile(path=path, bytes=found[1].size, sha256=found[1].sha256, downloadable=True))
    return files, len(paths) > limit


def _bad_key(key: str) -> bool:
    try:
        keys.relative_path(key)
    except keys.BadKey:
        return True
    return False


def escaped(path: str) -> str:
    """`path` printable and encodable (pure): each control character, backslash and undecodable byte (a lone
    surrogate from the file system's bytes) as \\xNN / \\uNNNN, the rest as it is."""
    out = []
    for ch in path:
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:  # os.fsdecode's surrogateescape of a non-UTF-8 byte
            out.append(f"\\x{code - 0xDC00:02x}")
        elif code < 0x20 or code == 0x7F or ch == "\\" or 0xD800 <= code <= 0xDFFF or 0x80 <= code < 0xA0:
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


@router.get("/jobs/{job_id}/outputs", response_model=OutputList, responses={404: {"model": ErrorDetail}})
def list_outputs(job_id: JobId, session: SessionDep, settings: SettingsDep) -> OutputList:
    """The files job `job_id` wrote under its work dir (or that its `outputs` globs name), by path."""
    job = job_or_404(session, job_id)
    files, truncated = output_files(settings, job)
    return OutputList(job_id=job_id, patterns=_patterns(job), files=files, truncated=truncated)


def _output_key(job_id: int, path: str) -> str:
    try:
        return keys.job_key(job_id, WORK + keys.relative_path(path))
    except keys.BadKey as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from None


@router.get(
    "/jobs/{job_id}/outputs/file",
    response_class=StreamingResponse,
    responses={200: {"content": {"application/octet-stream": {}}}, 404: {"model": ErrorDetail}},
)
def download_output(job_id: JobId, path: PathQuery, session: SessionDep, settings: SettingsDep) -> StreamingResponse:
    """One output file, its sha256 in X-Content-SHA256."""
    job = job_or_404(session, job_id)
    if not selected(path, _patterns(job)):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"{path} is not one of job {job_id}'s outputs (spec `outputs`)")
    return stream_artifact(settings, _output_key(job_id, path), f"job{job_id}_{path.rsplit('/', 1)[-1]}")


class _Pipe:
    """A write-only file an archive writer (in a thread) fills and the response drains, bounded."""

    def __init__(self) -> None:
        self.q: queue.Queue[bytes | None] = queue.Queue(QUEUED_CHUNKS)
        self.buf = bytearray()
        self.closed_by_reader = threading.Event()

    def _put(self, item: bytes | None) -> None:
        while True:
            if self.closed_by_reader.is_set():
                raise BrokenPipeError("the client went away")
            try:
                self.q.put(item, timeout=1.0)
                return
            except queue.Full:
                continue

    def write(self, data: bytes) -> int:
        self.buf += data
        while len(self.buf) >= CHUNK:
            self._put(bytes(self.buf[:CHUNK]))
            del self.buf[:CHUNK]
        return len(data)

    def flush(self) -> None:
        pass

    def finish(self) -> None:
        try:
            if self.buf:
                self._put(bytes(self.buf))
                self.buf.clear()
            self._put(None)
        except BrokenPipeError:
            pass


class _StoreReader:
    """A file-like view of a stored file's chunks (what tarfile and zipfile read from)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.chunks, self.rest = chunks, b""

    def read(self, n: int = -1) -> bytes:
        while n < 0 or len(self.rest) < n:
            chunk = next(self.chunks, None)
            if chunk is None:
                break
            self.rest += chunk
        out, self.rest = (self.rest, b"") if n < 0 else (self.rest[:n], self.rest[n:])
        return out


def _write_archive(pipe: _Pipe, fmt: str, members: list[tuple[str, artifacts.Entry, Any]]) -> None:
    try:
        if fmt == "tar":
            with tarfile.open(fileobj=pipe, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
                for name, entry, store in members:
                    info = tarfile.TarInfo(name)
                    info.size, info.mode = entry.size, 0o644
                    tar.addfile(info, _StoreReader(store.read(entry.key)))
        else:
            with zipfile.ZipFile(pipe, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:  # type: ignore[arg-type]
                for name, entry, store in members:
                    with zf.open(zipfile.ZipInfo(name), mode="w", force_zip64=entry.size > 0x7FFFFFFF) as out:
                        for chunk in store.read(entry.key):
                            out.write(chunk)
    except BrokenPipeError:
        pass
    finally:
        pipe.finish()


@router.get(
    "/jobs/{job_id}/outputs/archive",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"application/x-tar": {}, "application/zip": {}}},
        404: {"model": ErrorDetail},
        413: {"model": ErrorDetail},
    },  # fmt: skip
)
def download_archive(
    job_id: JobId,
    session: SessionDep,
    settings: SettingsDep,
    folder: Annotated[
        str, Query(max_length=keys.MAX_KEY_CHARS, description="A folder of the work dir ('': all).")
    ] = "",
    format: Annotated[Literal["tar", "zip"], Query(description="tar (uncompressed) or zip (stored).")] = "tar",
) -> StreamingResponse:
    """The outputs under `folder` as one archive, streamed as it is made (members named from the work dir)."""
    job = job_or_404(session, job_id)
    try:
        folder = keys.relative_path(folder.strip("/")) if folder.strip("/") else ""
    except keys.BadKey as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from None
    files, truncated = output_files(settings, job)
    chosen = [f for f in files if keys.under(f.path, folder)]
    if truncated:
        why = f"job {job_id} has more than {settings.outputs_max_files} outputs: download files one by one"
        raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, why)
    total = sum(f.bytes for f in chosen)
    if total > settings.outputs_max_archive_bytes:
        why = f"{total:,} bytes is over RANKZERO_OUTPUTS_MAX_ARCHIVE_BYTES: pick a smaller folder"
        raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, why)
    if not chosen:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND, f"job {job_id} has no outputs under {folder or 'its work dir'!r}"
        )
    members = []
    for f in chosen:
        found = artifacts.find(settings, _output_key(job_id, f.path))
        if found is not None:
            members.append((f.path, found[1], found[0]))
    pipe = _Pipe()
    threading.Thread(
        target=_write_archive, args=(pipe, format, members), name=f"archive-job{job_id}", daemon=True
    ).start()

    def body() -> Iterator[bytes]:
        try:
            while (chunk := pipe.q.get()) is not None:
                yield chunk
        finally:
            pipe.closed_by_reader.set()  # the writer sees it within a second and stops

    name = f"job{job_id}_{(folder or 'outputs').replace('/', '_')}.{format}"
    media = "application/x-tar" if format == "tar" else "application/zip"
    headers = {"Content-Disposition": f'attachment; filename="{name}"', "Cache-Control": "no-store"}
    return StreamingResponse(body(), media_type=media, headers=headers)
