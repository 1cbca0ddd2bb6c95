"""Team commands (issue 23): `rankzero login URL` / `logout` (profiles), `rankzero users ...` and
`rankzero tokens ...` (admin, or a member for her own tokens), `rankzero whoami`, and a job's housekeeping
(`archive`, `delete`, `tag`, `note`)."""

# No `from __future__ import annotations` in a module of commands: typer reads every command's annotations
# at each start, and from strings it evaluates each four times (0.02 s of CPU per start; issue 29).

import re
from typing import Annotated, Any

import typer

from cli.app import TokenOpt, UrlOpt, app, call, client_for, console, fail
from cli.client import PROFILE_NAME, Api, CliError, config_dir, read_profiles, write_profiles
from cli.views import local_time

# rich_markup_mode=None as on `app` (cli/app.py): click's plain help, without importing rich (issue 29).
users_app = typer.Typer(help="Users of this instance (admin): list, add, set role or quotas.", no_args_is_help=True,
                        rich_markup_mode=None)  # fmt: skip
tokens_app = typer.Typer(help="API tokens: list, add, revoke.", no_args_is_help=True, rich_markup_mode=None)
workers_app = typer.Typer(help="Worker hosts' own credentials (admin): list, add, revoke.", no_args_is_help=True,
                          rich_markup_mode=None)  # fmt: skip
app.add_typer(users_app, name="users")
app.add_typer(tokens_app, name="tokens")
app.add_typer(workers_app, name="workers")

RoleOpt = Annotated[str, typer.Option("--role", help="viewer, member or admin.")]


def _shown_once(token: dict[str, Any]) -> None:
    from rich.text import Text

    console.print(Text.assemble("token ", (token["name"], "bold"), f" (id {token['id']}) for {token['user']}:"))
    console.print(token["token"], highlight=False, soft_wrap=True)
    console.print(Text("Shown once: hand it over privately (`rankzero login URL` stores it).", style="dim"))


@app.command()
def login(
    url: Annotated[str, typer.Argument(help="The instance, e.g. https://train.example.com")],
    token: Annotated[
        str | None,
        typer.Option(
            "--token", envvar="RANKZERO_API_TOKEN", help="Your token (prompted when not given).", show_default=False
        ),
    ] = None,
    profile: Annotated[str, typer.Option(help="Profile name (several instances: one each).")] = "default",
) -> None:
    """Check a token against an instance and save both (owner-only file) as the profile commands use."""
    if not re.fullmatch(PROFILE_NAME, profile):
        fail("profile names are 1-40 letters, digits, '.', '_' or '-'", code=2)
    url = url.rstrip("/")
    if not url.startswith(("http://", "https://")):
        fail(f"{url!r} is not an http(s) URL", code=2)
    given = token or typer.prompt("token", hide_input=True)
    me = call(lambda: Api(url, given.strip()).get("/me"))
    data = read_profiles()
    data["profiles"][profile] = {"url": url, "token": given.strip()}
    data["default"] = profile
    path = call(lambda: _save(data))
    console.print(f"signed in to {url} as {me['name']} ({me['role']}); profile {profile!r} saved in {path}")


def _save(data: dict[str, Any]) -> str:
    try:
        return str(write_profiles(data))
    except OSError as exc:
        raise CliError(f"cannot write {config_dir()}: {exc}") from None


@app.command()
def logout(profile: Annotated[str, typer.Option(help="The profile to forget.")] = "default") -> None:
    """Forget a saved profile (its token stays valid: revoke it with `rankzero tokens revoke`)."""
    data = read_profiles()
    if data["profiles"].pop(profile, None) is None:
        fail(f"no profile {profile!r}")
    if data.get("default") == profile:
        data["default"] = next(iter(data["profiles"]), None)
    call(lambda: _save(data))
    console.print(f"profile {profile!r} forgotten")


@app.command()
def whoami(url: UrlOpt = None, token: TokenOpt = None) -> None:
    """Who this CLI signs in as, and the quota in force."""
    me = call(lambda: client_for(url, token).get("/me"))
    quota = me.get("quota")
    limits = (
        "no quota"
        if not quota
        else f"quota {quota['max_gpus']} GPUs, {quota['max_cpu_slots']} CPU slots, {quota['max_queued']} queued"
    )
    console.print(f"{me['name']} ({me['role']}), {limits}")


@users_app.command("list")
def users_list(url: UrlOpt = None, token: TokenOpt = None) -> None:
    rows = call(lambda: client_for(url, token).get("/users"))
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD)
    for col in ("id", "name", "role", "GPUs", "slots", "queued", "since"):
        table.add_column(col)
    for u in rows:
        quota = ["-"] * 3 if u["role"] == "admin" else quota_cells(u)
        table.add_row(str(u["id"]), u["name"], u["role"], *quota, local_time(u["created_at"], short=True))
    console.print(table)


def quota_cells(user: dict[str, Any]) -> list[str]:
    """A user's GPU, slot and queued quotas as set, "default" where unset (null: the member default)."""
    return ["default" if user[k] is None else str(user[k]) for k in ("max_gpus", "max_cpu_slots", "max_queued")]


@users_app.command("add")
def users_add(name: str, role: RoleOpt = "member", url: UrlOpt = None, token: TokenOpt = None) -> None:
    """Add a user; prints her first token once."""
    made = call(lambda: client_for(url, token).post("/users", json={"name": name, "role": role}))
    console.print(f"user {made['user']['name']} added ({made['user']['role']})")
    _shown_once(made["token"])


@users_app.command("set")
def users_set(  # noqa: PLR0913 (one parameter per command-line option)
    name: str,
    role: Annotated[str | None, typer.Option("--role", help="viewer, member or admin.")] = None,
    max_gpus: Annotated[int | None, typer.Option(help="Most GPUs at once (-1: the default).")] = None,
    max_cpu_slots: Annotated[int | None, typer.Option(help="Most CPU slots at once (-1: the default).")] = None,
    max_queued: Annotated[int | None, typer.Option(help="Most queued jobs (-1: the default).")] = None,
    max_priority: Annotated[
        str | None, typer.Option(help="Highest priority she may give a job, -1000…1000 ('default': 100).")
    ] = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Set a user's role, quotas or priority ceiling."""
    body: dict[str, Any] = {"role": role} if role else {}
    for key, value in (("max_gpus", max_gpus), ("max_cpu_slots", max_cpu_slots), ("max_queued", max_queued)):
        if value is not None:
            body[key] = None if value < 0 else value
    if max_priority is not None:  # a ceiling may be negative: 'default' (not -1) goes back to the default
        try:
            body["max_priority"] = None if max_priority == "default" else int(max_priority)
        except ValueError:
            fail(f"--max-priority {max_priority!r}: an integer -1000…1000, or 'default'", code=2)
    if not body:
        fail("nothing to set: give --role or a --max-* option", code=2)
    u = call(lambda: client_for(url, token).request("PATCH", f"/users/{name}", json=body))
    gpus, slots, queued = quota_cells(u)
    ceiling = "default" if u.get("max_priority") is None else u["max_priority"]
    console.print(
        f"user {u['name']}: {u['role']}, GPUs {gpus}, slots {slots}, queued {queued}, priority ceiling {ceiling}",
        highlight=False,
    )


@workers_app.command("list")
def workers_list(url: UrlOpt = None, token: TokenOpt = None) -> None:
    """Each worker host given a credential: when, last used, revoked."""
    rows = call(lambda: client_for(url, token).get("/workers"))
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD)
    for col in ("host", "token", "created", "last used", "revoked"):
        table.add_column(col)
    for w in rows:
        created, used, revoked = (
            local_time(w[k], short=True) if w[k] else "" for k in ("created_at", "last_used_at", "revoked_at")
        )
        table.add_row(w["host"], str(w["token_id"] or ""), created, used or "never", revoked)
    console.print(table)


@workers_app.command("add")
def workers_add(host: str, url: UrlOpt = None, token: TokenOpt = None) -> None:
    """A credential for worker host HOST (its RANKZERO_HOST_NAME), printed once; its earlier ones are revoked."""
    made = call(lambda: client_for(url, token).post("/workers", json={"host": host}))
    console.print(f"worker credential for host {made['host']} (token {made['token_id']}):")
    console.print(made["token"], highlight=False, soft_wrap=True)
    console.print(f"Shown once: set RANKZERO_WORKER_TOKEN to it on {made['host']} (it ships and fetches a worker's "
                  "files only; `rankzero workers revoke HOST` ends it).", style="dim")  # fmt: skip


@workers_app.command("revoke")
def workers_revoke(host: str, url: UrlOpt = None, token: TokenOpt = None) -> None:
    """Revoke worker host HOST's credential: refused from now on."""
    w = call(lambda: client_for(url, token).post(f"/workers/{host}/revoke"))
    console.print(f"worker credential of host {w['host']} revoked")


@tokens_app.command("list")
def tokens_list(user: str, url: UrlOpt = None, token: TokenOpt = None) -> None:
    rows = call(lambda: client_for(url, token).get(f"/users/{user}/tokens"))
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD)
    for col in ("id", "name", "created", "last used", "revoked"):
        table.add_column(col)
    for t in rows:
        table.add_row(
            str(t["id"]),
            t["name"],
            local_time(t["created_at"], short=True),
            local_time(t["last_used_at"], short=True) if t["last_used_at"] else "never",
            local_time(t["revoked_at"], short=True) if t["revoked_at"] else "",
        )
    console.print(table)


@tokens_app.command("add")
def tokens_add(user: str, name: str, url: UrlOpt = None, token: TokenOpt = None) -> None:
    """A new token for USER named NAME; printed once."""
    _shown_once(call(lambda: client_for(url, token).post(f"/users/{user}/tokens", json={"name": name})))


@tokens_app.command("revoke")
def tokens_revoke(token_id: int, url: UrlOpt = None, token: TokenOpt = None) -> None:
    """Revoke a token: refused from now on, and the dashboard sessions opened with it end."""
    t = call(lambda: client_for(url, token).post(f"/tokens/{token_id}/revoke"))
    console.print(f"token {t['id']} ({t['name']}) of {t['user']} revoked")


@app.command()
def archive(
    job_id: int, undo: Annotated[bool, typer.Option("--undo")] = False, url: UrlOpt = None, token: TokenOpt = None
) -> None:
    """Hide a job from the default list (`--undo` shows it again)."""
    job = call(lambda: client_for(url, token).post(f"/jobs/{job_id}/{'unarchive' if undo else 'archive'}"))
    console.print(f"job {job['id']}: {'archived' if job['archived'] else 'not archived'}")


@app.command()
def delete(
    job_id: int,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask.")] = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Delete an ended job with its run dir, checkpoints and artifacts (not undoable)."""
    if not yes and not typer.confirm(f"delete job {job_id}, its run dir and checkpoints?"):
        raise typer.Exit(1)
    call(lambda: _delete(client_for(url, token), job_id))
    console.print(f"job {job_id} deleted")


def _delete(client: Api, job_id: int) -> None:
    client.request_empty("DELETE", f"/jobs/{job_id}")


@app.command()
def tag(
    job_id: int,
    tags: Annotated[list[str] | None, typer.Argument(help="The job's tags (replacing its tags; none: clear).")] = None,
    note: Annotated[str | None, typer.Option(help="A free-text note (replaces the note).")] = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Set a job's tags (and note)."""
    body: dict[str, Any] = {"tags": tags or []}
    if note is not None:
        body["note"] = note
    job = call(lambda: client_for(url, token).request("PATCH", f"/jobs/{job_id}/annotations", json=body))
    console.print(f"job {job['id']}: tags {', '.join(job['tags']) or '(none)'}")
