"""Job commands: talk to a running service over REST (submit, list, show, follow, logs, metrics, cancel,
priority, checkpoints, download, resume, hosts, schema).

Server URL and token: --url / --token, else RANKZERO_URL / RANKZERO_API_TOKEN, else the instance the
environment's settings describe (RANKZERO_HOST / RANKZERO_PORT / RANKZERO_DATA_DIR, as `rankzero up`
resolves them; see cli/client.py `locate`).
"""

# No `from __future__ import annotations` in a module of commands: typer reads every command's annotations
# at each start, and from strings it evaluates each four times (0.02 s of CPU per start; issue 29).

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

# Nothing heavy at the top (rich, yaml, pydantic, httpx, the spec model): each command imports what it uses,
# so `rankzero --help` and a command's start stay cheap (issue 29; tests/perf/test_cli_imports.py).
from cli import views
from cli.app import TokenOpt, UrlOpt, app, call, client_for, console, err, fail
from cli.client import Api, CliError
from cli.console_note import console_words
from cli.rank_view import rank_lines
from cli.spec_input import load_spec, with_overrides
from cli.terminal import for_output


@app.command()
def submit(  # noqa: PLR0913 (one parameter per command-line option)
    spec: Annotated[Path, typer.Argument(help="Job spec, YAML or JSON (see `rankzero schema`).")],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Show a progress bar with live loss and ETA until the job ends.")
    ] = False,
    code: Annotated[
        Path | None,
        typer.Option(help="Pack this folder (.gitignore/.rankzeroignore honoured), upload it once, run with it."),
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Set a spec field: --set optimizer.lr=0.01 --set params.lr=0.1 (YAML value)."),
    ] = None,
    name: Annotated[str | None, typer.Option(help="The job's name (instead of the spec's).")] = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    include: Annotated[
        list[str] | None,
        typer.Option(
            "--include",
            help="With --code: upload paths matching this glob (gitignore syntax, repeatable) whatever .gitignore "
            "and .rankzeroignore say, e.g. --include 'data/*.bin'.",
        ),
    ] = None,
) -> None:
    """Submit a job (SPEC `-` reads it from standard input)."""
    if include and code is None:
        fail("--include chooses files of the --code folder: give --code DIR too")
    client = client_for(url, token)
    body = with_overrides(load_spec(spec), set_ or [], name)
    if code is not None:
        from cli.code import requirements_notice, upload_code

        _check_before_upload(body)
        body["code"] = call(lambda: upload_code(client, code, console, body.get("entrypoint"), include or ()))
        if notice := requirements_notice(code, body):  # a requirements.txt the spec does not install (issue 28)
            console.print(notice, markup=False, highlight=False)
    job = call(lambda: client.post("/jobs", json=body))
    _print_queued(job)
    if estimate := job.get("environment_estimate"):  # its own torch: a full environment, this big (issue 28)
        console.print(estimate["note"], markup=False, highlight=False, soft_wrap=True)
    if follow:
        _follow_to_end(client, job["id"])


# Stands in for the bundle's digest while the spec is checked before the upload (it is valid as a `code`).
_CODE_TO_COME = "sha256:" + "0" * 64


def _check_before_upload(body: dict[str, Any]) -> None:
    """Refuse a spec the model refuses before packing and uploading its folder (which can take minutes): the
    same check as the server's first (trainer/spec.py); the server's policies still decide at submit."""
    from pydantic import ValidationError

    from trainer.spec import JobSpec

    try:
        JobSpec.model_validate({**body, "code": _CODE_TO_COME})
    except ValidationError as exc:
        problems = [
            f"  {'.'.join(str(part) for part in e['loc']) or 'spec'}: {e['msg'].removeprefix('Value error, ')}"
            for e in exc.errors()
        ]
        fail("the spec is refused (nothing was uploaded):\n" + "\n".join(problems))


def _print_queued(job: dict[str, Any], note: str = "") -> None:
    # A script's batch is its own business: the built-in trainer's global batch means nothing there.
    from rich.text import Text

    is_script = bool((job.get("spec") or {}).get("entrypoint"))
    shape = "" if is_script else f", global batch {views.number(job['global_batch_size'])}"
    pool = f" in pool {job['pool']}" if job.get("pool") else ""
    console.print(
        Text.assemble(
            "job ", (str(job["id"]), "bold"), f" queued: {job['name']} ({job['strategy']}{shape}){pool}{note}"
        ),
        soft_wrap=True,
    )


def _follow_to_end(client: Api, job_id: int) -> None:
    """The live progress bar until the job ends; exit 1 unless it succeeded."""
    from cli.follow import follow as follow_job

    final = call(lambda: follow_job(client, job_id, console))
    _print_outcome(final)
    if final["status"] != "succeeded":
        raise typer.Exit(1)


def _print_outcome(job: dict[str, Any]) -> None:
    from rich.text import Text

    loss = f", loss {views.number(job['latest_loss'])}" if job.get("latest_loss") is not None else ""
    console.print(Text.assemble(f"job {job['id']}: ", views.status_text(job["status"]),
                                f" at step {views.steps(job)}{loss}"))  # fmt: skip
    if job.get("error"):
        console.print(views.text(job["error"], "red"), soft_wrap=True)


@app.command()
def jobs(  # noqa: PLR0913 (one parameter per command-line option)
    status: Annotated[str | None, typer.Option(help="Only jobs in this state.")] = None,
    name: Annotated[str | None, typer.Option(help="Only jobs with this name.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many.")] = 50,
    mine: Annotated[bool, typer.Option("--mine", help="Only my jobs.")] = False,
    owner: Annotated[str | None, typer.Option(help="Only this user's jobs.")] = None,
    tag: Annotated[str | None, typer.Option(help="Only jobs with this tag.")] = None,
    archived: Annotated[bool, typer.Option("--archived", help="Archived jobs (hidden otherwise).")] = False,
    sort: Annotated[
        str | None,
        typer.Option(help="Order: created, name, status, step, loss, param:NAME, metric:NAME; --sort=-KEY descends."),
    ] = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """List jobs, newest first (or by --sort)."""
    filters = {"mine": "true" if mine else None, "owner": owner, "tag": tag, "archived": "true" if archived else None}
    filters["sort"] = sort
    page = call(lambda: client_for(url, token).get("/jobs", status=status, name=name, limit=limit, **filters))
    console.print(views.jobs_table(page["items"], console.width))
    console.print(views.text(f"{len(page['items'])} of {page['total']} (times in {views.local_zone()})"))


@app.command()
def show(job_id: int, url: UrlOpt = None, token: TokenOpt = None) -> None:
    """A job's details and timeline."""
    job = call(lambda: client_for(url, token).get(f"/jobs/{job_id}"))
    console.print(views.show_table(job))
    if job.get("error"):
        console.print(views.text(job["error"], "red"), soft_wrap=True)
    for line in rank_lines(job):  # which rank is stuck (its stacks), which is slow (issue 38)
        console.print(views.text(line), soft_wrap=True)
    console.print(views.timeline_table(job.get("transitions", [])))
    if (job.get("spec") or {}).get("entrypoint"):  # a script job: what its console gave (issue 36)
        metrics = call(lambda: client_for(url, token).get(f"/jobs/{job_id}/metrics", max_points=10))
        for line in console_words(metrics.get("console")):
            console.print(views.text(line), soft_wrap=True)


@app.command()
def hosts(
    action: Annotated[str | None, typer.Argument(help="drain or undrain (none: list the hosts)")] = None,
    host: Annotated[str | None, typer.Argument(help="The host to drain or undrain")] = None,
    note: Annotated[str | None, typer.Option(help="Why it is drained (shown with the host)")] = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """The hosts jobs are placed on: free GPUs or slots, their storage, what runs where, when each was last seen.
    `rankzero hosts drain HOST`: nothing new goes there and its jobs checkpoint and move; `undrain HOST`."""
    if action is not None:
        _drain_command(action, host, note, client_for(url, token))
        return
    client = client_for(url, token)
    rows = call(lambda: client.get("/hosts"))
    store = _store_or_none(client) if rows else None  # where a `store` host's files go
    console.print(views.hosts_table(rows, store) if rows else views.text("(no host has registered: start a worker)"))


def _store_or_none(client: Api) -> dict[str, Any] | None:
    """The API's artifact store (disk or S3); None from an API too old to say (the column then says less)."""
    try:
        return client.get("/artifacts/storage")
    except CliError:
        return None


def _drain_command(action: str, host: str | None, note: str | None, client: Api) -> None:
    if action not in ("drain", "undrain") or not host:
        fail("usage: rankzero hosts [drain|undrain HOST] [--note TEXT]")
    body = {"note": note} if action == "drain" and note else None
    row = call(lambda: client.post(f"/hosts/{host}/{action}", json=body))
    word = "drained: nothing new goes there; its running jobs checkpoint and move" if action == "drain" else "undrained"
    console.print(f"host {row['name']} {word}")


@app.command()
def priority(job_id: int, value: int, url: UrlOpt = None, token: TokenOpt = None) -> None:
    """Set a queued job's priority (higher runs first, -1000 … 1000)."""
    job = call(lambda: client_for(url, token).request("PATCH", f"/jobs/{job_id}", json={"priority": value}))
    console.print(views.text(f"job {job['id']}: priority {job['priority']}"))


@app.command()
def logs(  # noqa: PLR0913 (one parameter per command-line option)
    job_id: int,
    rank: Annotated[int | None, typer.Option(help="Only this rank's log (default: every rank, merged).")] = None,
    stream: Annotated[
        str | None, typer.Option(help="Only this stream, stderr or stdout (default: both, merged).")
    ] = None,
    tail: Annotated[int | None, typer.Option(help="Only the last N bytes.")] = None,
    grep: Annotated[
        str | None, typer.Option("--grep", help="Merged view: only lines containing this (case-insensitive).")
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new output until the job ends.")
    ] = False,
    raw: Annotated[
        bool, typer.Option("--raw", help="Write the job's bytes as they are (escape sequences included).")
    ] = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """The job's console: every rank's stdout and stderr merged in time order, each line prefixed with its
    rank (`r1 err` marks rank 1's stderr); --rank R keeps R's lines; --stream shows one rank's stream as it is
    (rank 0's unless --rank). Control characters are
    shown as escapes on a terminal (--raw keeps them)."""
    client = client_for(url, token)

    def show(text: str) -> None:
        if raw:  # the job's bytes as they are (rich would drop some control characters)
            sys.stdout.write(text)
            sys.stdout.flush()
        else:  # out(): no markup, no wrapping; on a terminal the job's escapes are shown, not obeyed
            console.out(for_output(text, raw=False, stream=sys.stdout), end="", highlight=False)

    if stream is None:  # both streams merged: every rank's, or --rank's alone (its help says "default: both")
        _merged_console(client, job_id, tail, grep or "", follow, show, only_rank=rank)
        return
    if grep is not None:
        fail("--grep searches the merged view: leave out --stream")
    if stream not in (None, "stdout", "stderr"):
        fail(f"--stream {stream!r}: give stdout or stderr")
    _one_log(client, job_id, rank or 0, stream or "stderr", tail, follow, show)


def _one_log(client: Any, job_id: int, rank: int, stream: str, tail: int | None, follow: bool, show: Any) -> None:  # noqa: PLR0913
    """`rankzero logs JOB --rank R --stream S`: one rank's stream as it is, by byte offset."""
    chunk = call(lambda: client.get(f"/jobs/{job_id}/logs", rank=rank, stream=stream, tail=tail))
    show(chunk["text"])
    printed = bool(chunk["text"])
    offset = chunk["next_offset"]
    while follow:
        chunk = call(lambda o=offset: client.get(f"/jobs/{job_id}/logs", rank=rank, stream=stream, offset=o))
        if chunk["text"]:
            show(chunk["text"])
            printed = True
        offset = chunk["next_offset"]
        if not chunk["text"]:
            if call(lambda: client.get(f"/jobs/{job_id}"))["status"] in views.finished_states():
                break
            time.sleep(1.0)
    if not printed:  # on stderr: a redirected log stays the log
        err.print(f"(empty) rank {rank} {stream} of job {job_id}", style="dim", highlight=False)


def _merged_console(  # noqa: PLR0913
    client: Any, job_id: int, tail: int | None, grep: str, follow: bool, show: Any, only_rank: int | None = None
) -> None:
    """`rankzero logs JOB [--rank R]`: GET /jobs/{id}/console (R's lines only), then on from its cursor while
    following. Before, `--rank R` alone showed R's stderr only: the built-in trainer's progress (stdout) not at all."""

    def lines_of(chunk: dict[str, Any]) -> str:
        return "".join(views.console_line(ln) + "\n" for ln in views.lines_of_rank(chunk["lines"], only_rank))

    params: dict[str, Any] = {"q": grep} if grep else {}
    if tail is not None:
        params["limit"] = max(4096, tail)
    chunk = call(lambda: client.get(f"/jobs/{job_id}/console", **params))
    if (why := views.rank_not_shown(only_rank, chunk["ranks"], bool(chunk.get("more_ranks")), job_id)) is not None:
        fail(why)
    printed = bool(lines_of(chunk))
    show(lines_of(chunk))
    if chunk.get("more_ranks") and only_rank is None:
        err.print(f"(showing ranks {chunk['ranks'][0]}-{chunk['ranks'][-1]}; --rank N shows any other)", style="dim")
    cursor = chunk["cursor"]
    while follow:
        chunk = call(lambda c=cursor: client.get(f"/jobs/{job_id}/console", cursor=c, **params))
        if lines_of(chunk):
            show(lines_of(chunk))
            printed = True
        if chunk["cursor"] == cursor:
            if call(lambda: client.get(f"/jobs/{job_id}"))["status"] in views.finished_states():
                break
            time.sleep(1.0)
        cursor = chunk["cursor"]
    if not printed:
        who = "no rank" if only_rank is None else f"rank {only_rank}"
        err.print(f"(empty) {who} of job {job_id} wrote anything{' matching ' + repr(grep) if grep else ''}",
                  style="dim", highlight=False)  # fmt: skip


@app.command()
def cancel(job_id: int, url: UrlOpt = None, token: TokenOpt = None) -> None:
    """Cancel a job (a running one checkpoints and stops within the grace period)."""
    job = call(lambda: client_for(url, token).post(f"/jobs/{job_id}/cancel"))
    console.print(f"job {job_id}: {job['status']}")


@app.command()
def checkpoints(job_id: int, url: UrlOpt = None, token: TokenOpt = None) -> None:
    """A job's checkpoints."""
    rows = call(lambda: client_for(url, token).get(f"/jobs/{job_id}/checkpoints"))
    if not rows:
        err.print(f"(empty) job {job_id} has no checkpoints yet", style="dim", highlight=False)
        return
    console.print(views.checkpoints_table(rows, _run_dir_name(job_id)))


def _run_dir_name(job_id: int) -> str:
    """The job's run dir relative to the runs dir (`job_<id>`): checkpoint paths under it are what resume_from takes."""
    from trainer.run_dir import job_run_dir

    return job_run_dir(Path(), job_id).as_posix()


@app.command()
def download(  # noqa: PLR0913 (one parameter per command-line option)
    job_id: int,
    path: Annotated[
        str | None, typer.Argument(help="An output's path (`rankzero outputs JOB`); a folder ends with '/'.")
    ] = None,
    step: Annotated[int | None, typer.Option(help="Checkpoint step (default: the latest).")] = None,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="File to write (default: the checkpoint's name).")
    ] = None,
    archive: Annotated[bool, typer.Option("--archive", help="PATH is a folder: download it as a tar.")] = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Download a job's checkpoint (or, with PATH, one of its outputs) and verify its sha256."""
    client = client_for(url, token)
    if path is not None:  # an output file or folder (cli/output_commands.py)
        from cli.output_commands import download_output

        download_output(client, job_id, path, out, archive)
        return
    rows = call(lambda: client.get(f"/jobs/{job_id}/checkpoints"))
    if step is not None:
        rows = [c for c in rows if c["step"] == step]
    if not rows:
        fail(
            f"job {job_id} has no checkpoint{f' at step {step}' if step is not None else ''}: "
            f"see `rankzero checkpoints {job_id}`"
        )
    ckpt = max(rows, key=lambda c: c["step"])
    target = out or Path(Path(ckpt["path"]).name)
    import hashlib

    digest = hashlib.sha256()
    tmp = target.with_name(target.name + ".part")

    def fetch() -> None:
        with client.stream(f"/checkpoints/{ckpt['id']}/download") as r, open(tmp, "wb") as fh:
            for block in r.iter_bytes(1 << 20):
                digest.update(block)
                fh.write(block)

    call(fetch)
    if digest.hexdigest() != ckpt["sha256"]:
        tmp.unlink(missing_ok=True)
        fail(
            f"sha256 mismatch for checkpoint {ckpt['id']}: got {digest.hexdigest()}, "
            f"expected {ckpt['sha256']}; try again"
        )
    tmp.replace(target)
    saved = f"{target}  step {ckpt['step']:,}  {ckpt['bytes']:,} bytes  sha256 {ckpt['sha256']} ✓"
    console.print(views.text(saved), soft_wrap=True)


@app.command()
def follow(job_id: int, url: UrlOpt = None, token: TokenOpt = None) -> None:
    """Attach to a job: the live progress bar (step, loss, ETA) until it ends; exit 1 unless it succeeded."""
    client = client_for(url, token)
    job = call(lambda: client.get(f"/jobs/{job_id}"))
    if job["status"] in views.finished_states():
        _print_outcome(job)
        if job["status"] != "succeeded":
            raise typer.Exit(1)
        return
    _follow_to_end(client, job_id)


@app.command()
def metrics(
    job_id: int,
    name: Annotated[str | None, typer.Argument(help="One series (e.g. train/loss); default: every series.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Latest, min and max (with their steps) of each metric series of a job."""
    body = call(lambda: client_for(url, token).get(f"/jobs/{job_id}/metrics", name=name, max_points=2000))
    summaries = [views.series_summary(s) for s in body["series"]]
    if as_json:
        console.out(json.dumps(summaries, indent=2), highlight=False)
    elif not any(s["points"] for s in summaries):
        err.print(f"(empty) job {job_id} has no metric {name!r}" if name else f"(empty) job {job_id} has no metrics",
                  style="dim", highlight=False)  # fmt: skip
    else:
        for table in views.metrics_tables(summaries):
            console.print(table)


def resume_refused(message: str, job_id: int) -> str:
    """The server's refusal of a resume; a 403 (another member's job) also says what she can do instead."""
    if message.startswith("403 "):
        return (f"{message}\n  `rankzero clone {job_id}` trains a copy of it from the start as your own job; "
                f"`rankzero download {job_id}` gets its checkpoint")  # fmt: skip
    return message


@app.command()
def resume(
    job_id: int,
    step: Annotated[
        int | None, typer.Option("--checkpoint", "--step", help="Checkpoint step to resume from (default: the latest).")
    ] = None,
    max_steps: Annotated[
        int | None,
        typer.Option(help="Train to this step (default: the original end, or as long again past a finished run)."),
    ] = None,
    follow_job: Annotated[
        bool, typer.Option("--follow", "-f", help="Show the live progress bar until it ends.")
    ] = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Submit a new job that resumes JOB from a checkpoint (same spec, resume_from set, max_steps beyond it)."""
    from core.resume import resume_spec

    client = client_for(url, token)
    job = call(lambda: client.get(f"/jobs/{job_id}"))
    rows = [c for c in call(lambda: client.get(f"/jobs/{job_id}/checkpoints")) if step is None or c["step"] == step]
    if not rows:
        fail(f"job {job_id} has no checkpoint{f' at step {step}' if step is not None else ''}: "
              f"see `rankzero checkpoints {job_id}`")  # fmt: skip
    ckpt = max(rows, key=lambda c: c["step"])
    if max_steps is not None and job["spec"].get("entrypoint"):
        fail(f"job {job_id} runs its own script: --max-steps applies only to the built-in trainer (the script "
             "decides how long it trains)")  # fmt: skip
    spec, how = resume_spec(
        {**job["spec"], "name": job["name"]},
        total_steps=job.get("total_steps"),
        checkpoint_step=ckpt["step"],
        resume_from=f"{_run_dir_name(job_id)}/{ckpt['path']}",
        max_steps=max_steps,
    )
    try:
        new = client.post("/jobs", json=spec)
    except CliError as exc:
        fail(resume_refused(str(exc), job_id))
    _print_queued(new, f"\n  from job {job_id}'s checkpoint at step {ckpt['step']:,}: {how}")
    if follow_job:
        _follow_to_end(client, new["id"])


@app.command()
def schema() -> None:
    """Print the job spec's JSON Schema."""
    from trainer.spec import json_schema

    console.out(json.dumps(json_schema(), indent=2), highlight=False)
