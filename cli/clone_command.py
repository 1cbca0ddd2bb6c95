"""`rankzero clone JOB`: submit a copy of a job's spec, the command line's *Clone & edit* (`--set`, `--name`).

A job with its own packages keeps exactly the versions its source locked (spec `environment.lock_from`, as the
dashboard's clone does; docs/your-code.md "Bring your own packages"); `--relock` resolves them afresh instead,
as `uv lock --upgrade` would.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cli.app import TokenOpt, UrlOpt, app, call, client_for, console


def clone_spec(spec: dict[str, Any], source: int, locked: bool, relock: bool) -> tuple[dict[str, Any], str]:
    """Pure: the clone's spec (`lock_from` set to `source` when it has a lock, removed with `relock`) and the
    words saying what its packages will be."""
    env = spec.get("environment")
    if not isinstance(env, dict):
        return dict(spec), ""
    env = dict(env)
    if relock:
        env.pop("lock_from", None)
        words = "its packages are resolved afresh (--relock)"
    else:
        if locked:
            env["lock_from"] = source
        carried = env.get("lock_from")
        words = (f"its packages keep the versions job {carried} locked (--relock resolves them afresh)" if carried
                 else f"its packages are resolved afresh (job {source} has no lock yet)")  # fmt: skip
    return {**spec, "environment": env}, words


@app.command()
def clone(  # noqa: PLR0913 (one parameter per command-line option)
    job_id: int,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Change a spec field of the copy: --set optimizer.lr=0.01 (YAML value)."),
    ] = None,
    name: Annotated[str | None, typer.Option(help="The copy's name (default: the job's, with -copy).")] = None,
    relock: Annotated[
        bool, typer.Option("--relock", help="Resolve the job's own packages afresh instead of keeping its lock.")
    ] = False,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Show the live progress bar until it ends.")] = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Submit a copy of JOB's spec; its own packages keep JOB's locked versions unless --relock."""
    from cli.client import CliError
    from cli.job_commands import _follow_to_end, _print_queued
    from cli.spec_input import with_overrides
    from core.resume import derived_name

    client = client_for(url, token)
    job = call(lambda: client.get(f"/jobs/{job_id}"))
    locked = False
    if job["spec"].get("environment") and not relock:
        try:
            locked = bool(client.get(f"/jobs/{job_id}/environment")["packages"])
        except CliError:  # 404: it never prepared its environment
            locked = False
    spec, words = clone_spec({**job["spec"], "name": derived_name(job["name"], "copy")}, job_id, locked, relock)
    new = call(lambda: client.post("/jobs", json=with_overrides(spec, set_ or [], name)))
    _print_queued(new, f"\n  a copy of job {job_id}" + (f": {words}" if words else ""))
    if estimate := new.get("environment_estimate"):
        console.print(estimate["note"], markup=False, highlight=False, soft_wrap=True)
    if follow:
        _follow_to_end(client, new["id"])
