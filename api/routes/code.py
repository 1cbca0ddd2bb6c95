"""Code bundles over REST: upload one (the archive as the raw body), ask whether one is stored, fetch one.

The format, the checks and the store are core/bundles.py's. Credentials are checked from the
headers before a byte of the body is read (api/limits.py lets this one route stream its body past
the general 1 MiB limit only for a caller with credentials; `require_auth` runs before this
handler). The body is streamed to a temp file in the store's folder, hashed as it arrives, cut off
past RANKZERO_MAX_BUNDLE_BYTES, then every member is checked before the archive is kept: a bad
archive is refused at upload, never at run time.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path as FsPath
from typing import Annotated

import anyio
from fastapi import APIRouter, HTTPException, Path, Request, Response, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse
from sqlalchemy import String, cast
from sqlmodel import Session, select
from starlette.requests import ClientDisconnect

from api.deps import CurrentUser, SettingsDep, Uploader
from api.models import CodeBundle, CodeFile, CodeFiles, ErrorDetail, LeftOutFile, LeftOutRecord
from core import audit, bundles, permissions, users
from core.bundles import excluded
from core.db import get_engine, get_read_engine
from core.settings import Settings
from core.tables import Job
from core.users import Principal

router = APIRouter(tags=["code"])

Sha256 = Annotated[str, Path(pattern=r"^[0-9a-f]{64}$", description="The bundle's sha256 (64 lowercase hex digits).")]
ARCHIVE_TYPES = frozenset({"application/gzip", "application/x-gzip", "application/octet-stream"})
SHA_HEADER = "X-Bundle-SHA256"
# An upload may take body_timeout_s plus the time the largest bundle takes at this rate (a slow link
# still gets through; a trickle cannot hold a connection for ever).
MIN_UPLOAD_BYTES_PER_S = 256 * 1024
UPLOADS_OFF = (
    "code uploads are turned off on this server (RANKZERO_ALLOW_CODE_UPLOAD=false): use the built-in models, "
    "or code installed on the workers and listed in RANKZERO_ALLOWED_CODE"
)


# Who uploaded a bundle (POST /api/code, a new one or one already stored): one user id a line (JSON Lines),
# appended. Only they (and admins) may write its left-out record. Beside the bundle in the store; a `.json`
# name, so the store's cleanup removes it once its bundle is gone (core/bundles/store.py `cleanup`).
UPLOADERS_SUFFIX = ".uploaders.json"
MAX_UPLOADERS_BYTES = 1 << 20


def _uploaders_path(settings: Settings, sha256: str) -> FsPath:
    return bundles.archive_path(settings, sha256).with_name(f"{sha256}{UPLOADERS_SUFFIX}")


def uploaders(settings: Settings, sha256: str) -> set[int]:
    """The ids of the users who uploaded bundle `sha256` (none recorded: an empty set)."""
    try:
        with open(_uploaders_path(settings, sha256), "rb") as fh:
            lines = fh.read(MAX_UPLOADERS_BYTES).split(b"\n")
    except OSError:
        return set()
    return {int(line) for line in lines if line.strip().isdigit()}


def note_uploader(settings: Settings, sha256: str, user_id: int) -> None:
    """Add `user_id` to the bundle's uploaders (an append: two uploads at once both land)."""
    if user_id in uploaders(settings, sha256):
        return
    fd = os.open(_uploaders_path(settings, sha256), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "ab") as out:
        out.write(f"{int(user_id)}\n".encode())


def may_record_left_out(who: Principal, uploaded_by: set[int]) -> bool:
    """Whether `who` may write a bundle's left-out record: one of its uploaders, or an admin (pure; the rule is
    core/permissions.py's `code.left_out`, an uploader counting as an owner)."""
    # An uploader counts as the owner; a viewer never gets here (every write needs member: api/auth.py).
    return who.user_id in uploaded_by or permissions.allowed(who.role, "code.left_out", own=False)


def may_read(who: Principal, settings: Settings, sha256: str) -> None:
    """RANKZERO_CODE_VISIBILITY (issue 37): 'team', anyone signed in reads any bundle (a team shares its code,
    as it shares its jobs' logs); 'owner', only its uploaders, the owners of jobs that run it, admins and worker
    hosts (which fetch it to run it). 403 saying so otherwise."""
    if settings.code_visibility == "team" or who.role in ("admin", users.WORKER_ROLE):
        return
    if who.user_id in uploaders(settings, sha256) or _runs_it(settings, who.user_id, sha256):
        return
    raise HTTPException(
        status.HTTP_403_FORBIDDEN,
        f"code bundle {sha256[:12]} is readable by its uploaders, the owners of jobs that run it and admins on this "
        f"server (RANKZERO_CODE_VISIBILITY=owner); {who.name} is none of them",
    )


def _audit(settings: Settings, who: Principal, action: str, target: str, detail: str) -> None:
    """An audit row of its own (the bundle store is files, not rows: there is no transaction to share)."""
    with Session(get_engine(settings.resolved_database_url)) as session:
        audit.record(session, who, action, target, detail)
        session.commit()


def _runs_it(settings: Settings, user_id: int, sha256: str) -> bool:
    """Whether one of `user_id`'s jobs runs bundle `sha256` (its spec's `code`; the JSON text holds it quoted)."""
    with Session(get_read_engine(settings.resolved_database_url)) as session:
        query = select(Job.id).where(Job.owner_id == user_id, cast(Job.spec, String).contains(f'"{sha256}"')).limit(1)
        return session.exec(query).first() is not None


def _not_stored(sha256: str) -> HTTPException:
    return HTTPException(
        status.HTTP_404_NOT_FOUND,
        f"no code bundle sha256:{sha256} on this server: upload it with `rankzero submit --code DIR` (POST /api/code)",
    )


async def _receive(request: Request, tmp: FsPath, settings: Settings) -> str:
    """Stream the body into `tmp` within the size and time limits; its sha256."""
    limit = settings.max_bundle_bytes
    digest, size = hashlib.sha256(), 0
    try:
        with anyio.fail_after(settings.body_timeout_s + limit / MIN_UPLOAD_BYTES_PER_S):  # 3.10 too
            with open(tmp, "wb") as out:
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > limit:
                        raise HTTPException(
                            status.HTTP_413_CONTENT_TOO_LARGE,
                            str(bundles.too_large("compressed size", size, limit, "max_bundle_bytes")),
                        )
                    digest.update(chunk)
                    out.write(chunk)
    except TimeoutError:
        raise HTTPException(status.HTTP_408_REQUEST_TIMEOUT, "the bundle did not arrive in time; retry") from None
    except ClientDisconnect:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, "the upload was cut off; retry") from None
    if size == 0:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, "empty body: send the bundle (a tar.gz) as the request body")
    return digest.hexdigest()


def _check_request(request: Request, settings: Settings) -> None:
    if not settings.allow_code_upload:
        raise HTTPException(status.HTTP_403_FORBIDDEN, UPLOADS_OFF)
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type not in ARCHIVE_TYPES:
        raise HTTPException(
            status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
            f"send the bundle as the raw body with Content-Type application/gzip (got {content_type or 'none'!r})",
        )
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > settings.max_bundle_bytes:
        raise HTTPException(
            status.HTTP_413_CONTENT_TOO_LARGE,
            str(bundles.too_large("compressed size", int(declared), settings.max_bundle_bytes, "max_bundle_bytes")),
        )


@router.post(
    "/code",
    status_code=status.HTTP_201_CREATED,
    response_model=CodeBundle,
    responses={
        200: {"description": "Already stored (nothing written)."},
        403: {"model": ErrorDetail, "description": "Uploads are turned off (RANKZERO_ALLOW_CODE_UPLOAD=false)."},
        413: {"model": ErrorDetail, "description": "Over RANKZERO_MAX_BUNDLE_BYTES."},
        422: {"model": ErrorDetail, "description": "Not a valid bundle, an unsafe member, or over a limit."},
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "description": "The bundle (tar.gz); Content-Type application/gzip or application/octet-stream.",
            "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
        }
    },
)
async def upload_code(request: Request, response: Response, settings: SettingsDep, who: Uploader) -> CodeBundle:
    """Store a code bundle (a tar.gz, the raw body). 201 when new, 200 when already stored.

    An optional `X-Bundle-SHA256` header is checked against what arrived.
    """
    _check_request(request, settings)
    tmp = bundles.incoming(settings)
    try:
        sha256 = await _receive(request, tmp, settings)
        expected = request.headers.get(SHA_HEADER)
        if expected and expected.removeprefix(bundles.REF_PREFIX) != sha256:
            raise HTTPException(
                status.HTTP_400_BAD_REQUEST, f"{SHA_HEADER} {expected} does not match the body's sha256 {sha256}"
            )
        manifest, created = await run_in_threadpool(bundles.store, settings, tmp, sha256)
    except bundles.BundleTooLarge as exc:
        code = status.HTTP_413_CONTENT_TOO_LARGE if exc.setting == "max_bundle_bytes" else 422
        raise HTTPException(code, str(exc)) from None
    except bundles.BundleError as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, f"code bundle refused: {exc}") from None
    finally:
        tmp.unlink(missing_ok=True)
    await run_in_threadpool(note_uploader, settings, sha256, who.user_id)  # she may now record its left-out files
    if created:  # a new bundle on the server is a state change: audited (issue 37)
        await run_in_threadpool(
            _audit, settings, who, "code.upload", f"bundle {sha256[:12]}", f"{manifest.files} files"
        )
    else:
        response.status_code = status.HTTP_200_OK
    return CodeBundle(sha256=sha256, bytes=manifest.bytes, files=manifest.files, unpacked_bytes=manifest.unpacked_bytes)


@router.head("/code/{sha256}", responses={404: {"description": "Not stored: upload it."}})
def has_code(sha256: Sha256, settings: SettingsDep) -> Response:
    """200 when the bundle is stored (its size in X-Bundle-Bytes), else 404."""
    path = bundles.archive_path(settings, sha256)
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return Response(status_code=status.HTTP_404_NOT_FOUND)
    bundles.mark_used(settings, sha256)  # `rankzero submit --code` asks before it submits: a use (size cap)
    return Response(status_code=status.HTTP_200_OK, headers={"X-Bundle-Bytes": str(size)})


@router.get(
    "/code/{sha256}",
    response_class=FileResponse,
    responses={200: {"content": {"application/gzip": {}}}, 404: {"model": ErrorDetail}},
)
def download_code(sha256: Sha256, settings: SettingsDep, who: CurrentUser) -> FileResponse:
    """The bundle itself (for workers on hosts without the shared runs dir)."""
    may_read(who, settings, sha256)
    path = bundles.archive_path(settings, sha256)
    if not path.is_file():
        raise _not_stored(sha256)
    bundles.mark_used(settings, sha256)
    return FileResponse(path, media_type="application/gzip", filename=f"{sha256}.tar.gz", headers={SHA_HEADER: sha256})


@router.get("/code/{sha256}/files", response_model=CodeFiles, responses={404: {"model": ErrorDetail}})
def list_code_files(sha256: Sha256, settings: SettingsDep, who: CurrentUser) -> CodeFiles:
    """Every file in the bundle, with its size."""
    may_read(who, settings, sha256)
    try:
        found = bundles.manifest(settings, sha256)
    except bundles.BundleError as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, f"the stored bundle is unreadable: {exc}") from None
    if found is None:
        raise _not_stored(sha256)
    return CodeFiles(
        sha256=sha256,
        bytes=found.bytes,
        files=found.files,
        unpacked_bytes=found.unpacked_bytes,
        paths=[CodeFile(path=p, size=s) for p, s in found.paths],
        left_out=_left_out(settings, sha256),
    )


def _left_out(settings: Settings, sha256: str) -> list[LeftOutFile]:
    return [
        LeftOutFile(
            path=e.path, bytes=e.bytes, files=e.files, ignore_file=e.rule.file, line=e.rule.line, pattern=e.rule.pattern
        )
        for e in excluded.read_record(settings, sha256)
    ]


@router.get("/code/{sha256}/left-out", response_model=list[LeftOutFile], responses={404: {"model": ErrorDetail}})
def get_left_out(sha256: Sha256, settings: SettingsDep, who: CurrentUser) -> list[LeftOutFile]:
    """What the upload of this bundle left out, largest first ([] when its uploader sent no record): the job
    page shows it at once, without fetching the bundle's whole file list."""
    may_read(who, settings, sha256)
    if not bundles.archive_path(settings, sha256).is_file():
        raise _not_stored(sha256)
    return _left_out(settings, sha256)


@router.put(
    "/code/{sha256}/left-out",
    response_model=LeftOutRecord,
    responses={
        403: {"model": ErrorDetail, "description": "The caller did not upload this bundle (and is no admin)."},
        404: {"model": ErrorDetail},
        413: {"model": ErrorDetail},
        422: {"model": ErrorDetail},
    },
)
async def put_left_out(sha256: Sha256, request: Request, settings: SettingsDep, who: CurrentUser) -> LeftOutRecord:
    """What `rankzero submit --code` left out of this bundle's upload (the ignore file and line of each), kept
    beside it for the job page and the failure headlines (issue 27). The latest upload's record wins. Only
    a user who uploaded the bundle (POST /api/code), or an admin, may write it (403 otherwise)."""
    if not bundles.archive_path(settings, sha256).is_file():
        raise _not_stored(sha256)
    if not may_record_left_out(who, await run_in_threadpool(uploaders, settings, sha256)):
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            f"the left-out record of bundle {sha256[:12]} is written by a user who uploaded it (POST /api/code) or "
            f"an admin; {who.name} is {who.role} and did not upload it",
        )
    body = await request.body()  # bounded: api/limits.py caps bodies at 1 MiB
    if len(body) > excluded.MAX_RECORD_BYTES:
        raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, "the record of left-out files is over 1 MiB")
    try:
        record = json.loads(body)
    except ValueError:
        record = None
    if not isinstance(record, dict) or not isinstance(record.get("entries"), list):
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            'the record of left-out files must be JSON like {"entries": [{"path", "bytes", "files", "file", '
            '"line", "pattern"}]}, as `rankzero submit --code` sends it',
        )
    items = excluded.from_json(body)  # each entry checked; an ill-formed one is dropped
    await run_in_threadpool(excluded.write_record, settings, sha256, items)
    await run_in_threadpool(_audit, settings, who, "code.left_out", f"bundle {sha256[:12]}", f"{len(items)} entries")
    return LeftOutRecord(entries=len(items))
