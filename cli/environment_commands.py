"""A job's own packages from the command line: `rankzero environment JOB` prints the locked packages and
versions every node and restart of the job installs, how the last preparation went, and (`--log`) the
tail of uv's output. REST: GET /api/jobs/{id}/environment (worker/environments/ writes it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli.app import TokenOpt, UrlOpt, app, call, client_for, console
from cli.terminal import safe_for_terminal

if TYPE_CHECKING:  # rich is imported where used: not at a command's start (issue 29)
    from rich.table import Table


def environment_summary(env: dict[str, Any]) -> str:
    if env["state"] == "waiting":
        return "environment waiting: prepared when the job starts"
    how = "cached" if env["cached"] else "built"
    took = f", {how} in {env['prepare_s']:.1f} s" if env.get("prepare_s") is not None else ""
    size = f", {env['size_bytes'] / 1e6:,.1f} MB on its host" if env.get("size_bytes") else ""
    torch = "its own torch" if env["own_torch"] else f"the service's torch {env.get('torch') or '?'}"
    return f"environment {env['state']}: {len(env['packages'])} packages over {torch}{took}{size}"


def packages_table(env: dict[str, Any]) -> Table:
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, header_style="bold")
    table.add_column("package")
    table.add_column("version")
    for p in env["packages"]:
        table.add_row(Text(safe_for_terminal(p["name"])), Text(safe_for_terminal(p["version"])))
    return table


@app.command()
def environment(
    job_id: int,
    log: Annotated[bool, typer.Option("--log", help="Also print the tail of uv's output.")] = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """A job's own Python packages (spec `environment`): the locked versions, and how they were prepared."""
    from rich.text import Text

    env = call(lambda: client_for(url, token).get(f"/jobs/{job_id}/environment"))
    console.print(environment_summary(env), markup=False, highlight=False)
    if env.get("error"):
        console.print(Text(safe_for_terminal(env["error"])))
    if env["packages"]:
        console.print(packages_table(env))
    if log and env.get("log_tail"):
        console.print(Text(safe_for_terminal(env["log_tail"])))
