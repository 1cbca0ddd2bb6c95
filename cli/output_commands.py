"""A job's outputs from the command line: `rankzero outputs JOB` lists them (path, size, sha256);
`rankzero download JOB PATH` fetches one file (checked against its sha256) or, for a folder
(`PATH/` or `--archive`), a tar of it. REST: GET /api/jobs/{id}/outputs[/file|/archive]."""

# No `from __future__ import annotations` in a module of commands: typer reads every command's annotations
# at each start, and from strings it evaluates each four times (0.02 s of CPU per start; issue 29).

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from cli.app import TokenOpt, UrlOpt, app, call, client_for, console, err, fail
from cli.client import Api
from cli.terminal import for_output
from cli.views import text

if TYPE_CHECKING:  # rich is imported where a table is built: not at a command's start (issue 29)
    from rich.table import Table


def outputs_table(listing: dict[str, Any]) -> "Table":
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    for column, justify in (("path", "left"), ("bytes", "right"), ("sha256", "left")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for f in listing["files"]:
        table.add_row(text(for_output(f["path"], raw=False, stream=sys.stdout)), f"{f['bytes']:,}", f["sha256"] or "-")
    return table


@app.command()
def outputs(job_id: int, url: UrlOpt = None, token: TokenOpt = None) -> None:
    """The files a job wrote under its work dir (or its spec's `outputs` globs), with size and sha256."""
    listing = call(lambda: client_for(url, token).get(f"/jobs/{job_id}/outputs"))
    if not listing["files"]:
        err.print(f"(empty) job {job_id} has no outputs yet", style="dim", highlight=False)
        return
    console.print(outputs_table(listing))
    if listing["truncated"]:
        err.print(f"(only the first {len(listing['files'])} are listed)", style="dim", highlight=False)


def _fetch(client: Api, path: str, target: Path) -> str:
    """Stream `path` of the API into `target` (via a .part file); the sha256 of what arrived."""
    import hashlib

    digest = hashlib.sha256()
    tmp = target.with_name(target.name + ".part")

    def fetch() -> None:
        with client.stream(path) as r, open(tmp, "wb") as fh:
            for block in r.iter_bytes(1 << 20):
                digest.update(block)
                fh.write(block)

    call(fetch)
    tmp.replace(target)
    return digest.hexdigest()


def download_output(client: Api, job_id: int, path: str, out: Path | None, archive: bool) -> None:
    """One output file (sha256 checked against the listing) or a folder as a tar."""
    if archive or path.endswith("/"):
        folder = path.strip("/")
        target = out or Path(f"job{job_id}_{folder.replace('/', '_') or 'outputs'}.tar")
        query = urlencode({"folder": folder, "format": "tar"})
        _fetch(client, f"/jobs/{job_id}/outputs/archive?{query}", target)
        console.print(text(f"{target}  (tar of {folder or 'all outputs'})"), soft_wrap=True)
        return
    listing = call(lambda: client.get(f"/jobs/{job_id}/outputs"))
    entry = next((f for f in listing["files"] if f["path"] == path), None)
    if entry is None:
        fail(f"job {job_id} has no output {path!r}: see `rankzero outputs {job_id}`")
    target = out or Path(Path(path).name)
    got = _fetch(client, f"/jobs/{job_id}/outputs/file?{urlencode({'path': path})}", target)
    if entry["sha256"] and got != entry["sha256"]:
        target.unlink(missing_ok=True)
        fail(f"sha256 mismatch for {path}: got {got}, expected {entry['sha256']}; try again")
    console.print(text(f"{target}  {entry['bytes']:,} bytes  sha256 {got} ✓"), soft_wrap=True)
