"""`rankzero submit --code DIR`: pack the folder, say what is sent, upload it unless the server has it.

Packing is core/bundles.py's (ignore files honoured, .git never, deterministic: the same tree gives
the same sha256). The server is asked first (HEAD /api/code/<sha256>): a second submit of the same
tree uploads nothing. A tree whose files are unchanged since the last submit from this machine (same
paths, sizes, mtimes, ctimes, inodes: git's index heuristic) is not even packed again: its sha256 is
remembered in `$XDG_CACHE_HOME/rankzero/bundles.json` (default ~/.cache). Every submit says what the
ignore files left out (and warns when the entrypoint names it).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from cli.client import Api, CliError, _detail, rejected_token
from core import bundles
from core.bundles import excluded as left_out
from core.bundles.include import Includes

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

UPLOAD_CHUNK = 256 * 1024
UPLOAD_TIMEOUT_S = 600.0
CACHE_ENTRIES = 32


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
        raise CliError(rejected_token(api.url, api.instance.token_from if api.instance else None))
    return r.status_code == 200


def _upload(api: Api, packed: bundles.Packed, console: Console) -> None:
    from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn  # only when bytes go up

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
        raise CliError(rejected_token(api.url, api.instance.token_from if api.instance else None))
    if r.status_code not in (200, 201):
        raise CliError(f"the server refused the code bundle ({r.status_code}): {_detail(r)}\nlargest: {packed.largest}")


def _cache_file() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rankzero" / "bundles.json"


def _tree_key(folder: Path, files: list[bundles.SourceFile]) -> str:
    """Changes whenever a packed file may have changed (or the file list, ignore rules included)."""
    digest = hashlib.sha256(str(folder.resolve()).encode())
    for f in files:
        st = f.source.stat()
        digest.update(
            f"{f.path}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\0{st.st_ino}\0{st.st_mode}\n".encode()
        )
    return digest.hexdigest()


def _cache_read() -> dict[str, dict]:
    try:
        data = json.loads(_cache_file().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _cache_write(key: str, packed: bundles.Packed) -> None:
    entries = _cache_read()
    entries.pop(key, None)
    entries[key] = {"sha256": packed.sha256, "bytes": packed.bytes, "files": packed.files,
                    "unpacked_bytes": packed.unpacked_bytes, "largest": packed.largest}  # fmt: skip
    path = _cache_file()
    with contextlib.suppress(OSError):  # a read-only home: no cache, no harm
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(dict(list(entries.items())[-CACHE_ENTRIES:])))
        tmp.replace(path)


def _summary(folder: Path, info: dict[str, Any] | bundles.Packed) -> str:
    def get(key: str) -> Any:
        return info.get(key) if isinstance(info, dict) else getattr(info, key)

    return (
        f"code: {folder} → {get('files'):,} files, {_mb(get('unpacked_bytes'))} "
        f"({_mb(get('bytes'))} compressed), largest: {get('largest')}\n"
        # Whole: what a spec's `code` takes as it is (a shortened digest is refused; issue 35).
        f"code: sha256:{get('sha256')}"
    )


def _say_what_is_left_out(
    folder: Path, entrypoint: str | None, console: Console, include: Includes | None = None
) -> list[left_out.Excluded]:
    """The files the ignore files leave out (largest first, with the line that excluded each), and a warning
    for each entrypoint argument that names one (core/bundles/excluded.py); returns them."""
    try:
        items = left_out.excluded(folder, include)
    except OSError:
        return []
    for line in left_out.report(items) + left_out.warnings(entrypoint, items):
        console.print(line, markup=False, highlight=False)
    return items


def upload_code(
    api: Api, folder: Path, console: Console, entrypoint: str | None = None, include: Sequence[str] = ()
) -> str:
    """Pack `folder`, upload it if the server lacks it; the spec's `code` value ("sha256:<hex>"). `include`:
    globs uploaded whatever the ignore files say (core/bundles/include.py). The server keeps the record of
    what was left out beside the bundle (the job page lists it; a failure opening such a file names it)."""
    if not folder.is_dir():
        raise CliError(f"--code {folder}: not a folder")
    try:
        forced = Includes(include)
    except bundles.BundleError as exc:
        raise CliError(str(exc)) from None
    items = _say_what_is_left_out(folder, entrypoint, console, forced)
    try:
        files = bundles.collect(folder, forced)
        key = _tree_key(folder, files)
    except (bundles.BundleError, OSError) as exc:
        raise CliError(f"cannot pack {folder}: {exc}") from None
    known = _cache_read().get(key)
    if isinstance(known, dict) and isinstance(known.get("sha256"), str) and _stored(api, known["sha256"]):
        console.print(_summary(folder, known))
        console.print("code: unchanged since the last submit and already on the server, nothing to upload")
        _send_record(api, known["sha256"], items, console)
        return bundles.ref(known["sha256"])
    with tempfile.TemporaryDirectory(prefix="rankzero-bundle-") as tmp:
        try:
            packed = bundles.pack(folder, Path(tmp) / "bundle.tar.gz", files=files)
        except (bundles.BundleError, OSError) as exc:
            raise CliError(f"cannot pack {folder}: {exc}") from None
        console.print(_summary(folder, packed))
        if _stored(api, packed.sha256):
            console.print("code: already on the server, nothing to upload")
        else:
            _upload(api, packed, console)
    _cache_write(key, packed)
    _send_record(api, packed.sha256, items, console)
    return bundles.ref(packed.sha256)


def _send_record(api: Api, sha256: str, items: list[left_out.Excluded], console: Console) -> None:
    """Tell the server what this upload left out (PUT /api/code/<sha256>/left-out); a server that cannot take it
    runs the job all the same, so a failure is a note, not an error."""
    try:
        r = api.http.put(
            f"/code/{sha256}/left-out", content=left_out.to_json(items), headers={"Content-Type": "application/json"}
        )
    except httpx.TransportError:
        r = None
    if r is None or r.status_code != 200:
        console.print("code: note: the server did not keep the list of left-out files (the job page will not show it)")


def requirements_notice(folder: Path, spec: dict[str, Any]) -> str | None:
    """A line for `rankzero submit --code DIR` when DIR has a requirements.txt at its root that the spec's
    `environment` does not name (the job would run without those packages: docs/your-code.md)."""
    if not (folder / "requirements.txt").is_file():
        return None
    env = spec.get("environment")
    named = env.get("requirements") if isinstance(env, dict) else None
    if named == "requirements.txt":
        return None
    how = "environment: {requirements: requirements.txt}"
    if named:
        return f"note: {folder}/requirements.txt is not the file the spec names ({named}); it is not installed"
    return (
        f"note: {folder}/requirements.txt is not installed: the spec names no environment. Add `{how}` to the "
        "spec to run with those packages (docs/your-code.md, 'Bring your own packages')"
    )
