"""`rankzero submit --code DIR`: pack the folder, say what is sent, upload it unless the server has it.

Packing is core/bundles.py's (ignore files honoured, .git never, deterministic: the same tree gives
the same sha256). The server is asked first (HEAD /api/code/<sha256>): a second submit of the same
tree uploads nothing.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

from cli.client import Api, CliError, _detail
from core import bundles

UPLOAD_CHUNK = 256 * 1024
UPLOAD_TIMEOUT_S = 600.0


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


def _chunks(path: Path, progress: Progress, task: object) -> Iterator[bytes]:
    with open(path, "rb") as fh:
        while chunk := fh.read(UPLOAD_CHUNK):
            progress.update(task, advance=len(chunk))  # type: ignore[arg-type]
            yield chunk


def _stored(api: Api, sha256: str) -> bool:
    try:
        r = api.http.head(f"/code/{sha256}")
    except httpx.TransportError as exc:
        raise CliError(f"cannot reach the API at {api.url} ({exc}): is it running?") from None
    if r.status_code == 401:
        raise CliError("the API rejected the token: pass --token or set RANKZERO_API_TOKEN")
    return r.status_code == 200


def _upload(api: Api, packed: bundles.Packed, console: Console) -> None:
    with Progress(
        "[progress.description]{task.description}", BarColumn(), DownloadColumn(), TransferSpeedColumn(),
        console=console, transient=False,
    ) as progress:  # fmt: skip
        task = progress.add_task("uploading", total=packed.bytes)
        try:
            r = api.http.post(
                "/code",
                content=_chunks(packed.archive, progress, task),
                headers={
                    "Content-Type": "application/gzip",
                    "Content-Length": str(packed.bytes),
                    "X-Bundle-SHA256": packed.sha256,
                },
                timeout=UPLOAD_TIMEOUT_S,
            )
        except httpx.TransportError as exc:
            raise CliError(f"uploading the code bundle to {api.url} failed ({exc}); try again") from None
    if r.status_code == 401:
        raise CliError("the API rejected the token: pass --token or set RANKZERO_API_TOKEN")
    if r.status_code not in (200, 201):
        raise CliError(f"the server refused the code bundle ({r.status_code}): {_detail(r)}\nlargest: {packed.largest}")


def upload_code(api: Api, folder: Path, console: Console) -> str:
    """Pack `folder`, upload it if the server lacks it; the spec's `code` value ("sha256:<hex>")."""
    if not folder.is_dir():
        raise CliError(f"--code {folder}: not a folder")
    with tempfile.TemporaryDirectory(prefix="rankzero-bundle-") as tmp:
        try:
            packed = bundles.pack(folder, Path(tmp) / "bundle.tar.gz")
        except (bundles.BundleError, OSError) as exc:
            raise CliError(f"cannot pack {folder}: {exc}") from None
        console.print(
            f"code: {folder} → {packed.files:,} files, {_mb(packed.unpacked_bytes)} "
            f"({_mb(packed.bytes)} compressed), sha256:{packed.sha256[:12]}…  largest: {packed.largest}"
        )
        if _stored(api, packed.sha256):
            console.print("code: already on the server, nothing to upload")
        else:
            _upload(api, packed, console)
    return bundles.ref(packed.sha256)
