"""Sweep commands: `rankzero sweep FILE`, `rankzero sweep show|cancel|pause|resume|extend ID`,
`rankzero sweeps` (REST: api/routes/sweeps.py)."""

# No `from __future__ import annotations` in a module of commands: typer reads every command's annotations
# at each start, and from strings it evaluates each four times (0.02 s of CPU per start; issue 29).

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli import views
from cli.app import TokenOpt, UrlOpt, app, call, client_for, console, fail

if TYPE_CHECKING:  # rich is imported where used: not at a command's start (issue 29)
    from rich.table import Table

ACTIONS = ("show", "cancel", "pause", "resume", "extend")


@app.command()
def sweep(
    what: Annotated[
        str, typer.Argument(help="A sweep spec file (YAML/JSON, `-` for stdin), or show/cancel/pause/resume/extend.")
    ],
    sweep_id: Annotated[int | None, typer.Argument(help="The sweep's id (with an action).")] = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    code: Annotated[
        Path | None,
        typer.Option(help="Pack this folder (as `rankzero submit --code`), upload it once: every trial runs with it."),
    ] = None,
    include: Annotated[
        list[str] | None,
        typer.Option("--include", help="With --code: upload paths matching this glob whatever the ignore files say."),
    ] = None,
) -> None:
    """Start a sweep from FILE, or act on one: show ID (the trials table), cancel, pause, resume, extend (the best)."""
    client = client_for(url, token)
    if (code is not None or include) and what in ACTIONS:
        fail(f"--code and --include go with a sweep spec file, not `rankzero sweep {what}`", 2)
    if include and code is None:
        fail("--include chooses files of the --code folder: give --code DIR too", 2)
    if what in ACTIONS:
        if sweep_id is None:
            fail(f"`rankzero sweep {what}` needs the sweep's id", 2)
        if what == "show":
            _show(call(lambda: client.get(f"/sweeps/{sweep_id}")))
        elif what == "extend":
            job = call(lambda: client.post(f"/sweeps/{sweep_id}/extend-best", json={}))
            console.print(f"job {job['id']} queued: {job['name']} (the best trial, resumed for longer)")
        else:
            row = call(lambda: client.post(f"/sweeps/{sweep_id}/{what}"))
            console.print(f"sweep {row['id']}: {row['status']}")
        return
    from rich.text import Text

    from cli.spec_input import load_spec

    body = load_spec(Path(what))
    if code is not None:  # the trials' job gets the bundle's ref, as submit's spec does
        from cli.code import upload_code

        job = body.get("job") if isinstance(body.get("job"), dict) else None
        if job is None:
            fail("--code needs the sweep spec's `job` (the base job spec every trial starts from)", 2)
        else:
            job["code"] = call(lambda: upload_code(client, code, console, job.get("entrypoint"), include or ()))
    row = call(lambda: client.post("/sweeps", json=body))
    console.print(
        Text.assemble(
            "sweep ",
            (str(row["id"]), "bold"),
            f" started: {row['name']} ({row['method']}, {row['trials_total']} trials, {row['parallel']} at a time)",
        )
    )


@app.command()
def sweeps(
    limit: Annotated[int, typer.Option(help="At most this many.")] = 50,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """List sweeps, newest first, with their best trial."""
    client = client_for(url, token)
    page = call(lambda: client.get("/sweeps", limit=limit))
    from rich import box
    from rich.table import Table

    # The look of every other list (rankzero jobs, users): a rule under the header, no grid.
    table = Table("id", "name", "status", "method", "metric", "trials", "best job", "best",
                  box=box.SIMPLE_HEAD, pad_edge=False)  # fmt: skip
    for s in page["sweeps"]:
        table.add_row(
            str(s["id"]),
            views.text(s["name"]),
            s["status"],
            s["method"],
            f"{s['metric']} ({s['goal']})",
            str(s["trials_total"]),
            str(s["best_job_id"] or "–"),
            views.number(s["best_value"]),
        )
    console.print(table)


def _show(detail: dict[str, Any]) -> None:
    from rich.text import Text

    console.print(
        Text.assemble(
            ("sweep ", "bold"),
            f"{detail['id']} {detail['name']}: {detail['status']}, "
            f"{detail['method']}, {detail['metric']} ({detail['goal']})",
        )
    )
    if detail.get("note"):
        console.print(views.text(detail["note"]), soft_wrap=True)
    if detail.get("extend_refusal"):  # a script sweep without a length param: say why extend is not offered
        console.print(views.text(f"`rankzero sweep extend` is not offered: {detail['extend_refusal']}"), soft_wrap=True)
    table = trials_table(detail)
    console.print(table)


def trials_table(detail: dict[str, Any]) -> "Table":
    """One row per trial, best first (the API's order), the best marked with ★; one column per parameter."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    params = list(detail["parameters"])
    table = Table("", "trial", "job", "status", *params, "final", "best", "step", box=box.SIMPLE_HEAD, pad_edge=False)
    for t in detail["trials"]:
        values = [
            views.number(t["params"].get(p)) if not isinstance(t["params"].get(p), str) else views.text(t["params"][p])
            for p in params
        ]
        table.add_row(
            "★" if t["is_best"] else "",
            str(t["number"]),
            str(t["job_id"]),
            views.status_text(t["status"]) if t["status"] != "pruned" else Text("pruned", "yellow"),
            *values,
            views.number(t["final"]),
            views.number(t["best"]),
            str(t["step"]),
        )
    return table
