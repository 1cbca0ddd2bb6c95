"""The `rankzero` command: run the service (up, api, worker) and talk to it over REST.

Server URL and token: --url / --token, else RANKZERO_URL / RANKZERO_API_TOKEN, else the instance the
environment's settings describe (RANKZERO_HOST / RANKZERO_PORT / RANKZERO_DATA_DIR, as `rankzero up`
resolves them; see cli/client.py `locate`). Only `up` and `api` ever create a token file.

What a job says (names, errors, tracebacks, logs) prints verbatim: never as rich markup.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from pydantic import ValidationError
from rich.console import Console
from rich.text import Text

from cli import views
from cli.client import Api, CliError, default_url, forget_server, locate, record_server
from core.settings import Settings

app = typer.Typer(help="rankzero: PyTorch training jobs (torchrun DDP / gradient accumulation) behind a REST API.",
                  no_args_is_help=True, pretty_exceptions_enable=False)  # fmt: skip
console = Console(emoji=False)
err = Console(stderr=True, emoji=False)

UrlOpt = Annotated[
    str | None, typer.Option("--url", envvar="RANKZERO_URL", help="API base URL (default: the local settings).")
]
TokenOpt = Annotated[
    str | None,
    typer.Option(
        "--token", envvar="RANKZERO_API_TOKEN", help="API token (default: the local one).", show_default=False
    ),
]


def _api(url: str | None, token: str | None) -> Api:
    # A token given here is only sent, never served: the local settings need not accept it.
    settings = _settings(api_token=None) if token else _settings()
    try:
        found = locate(settings, url, token)
        return Api(found.url, found.token, instance=found)
    except (CliError, ValueError) as exc:  # no token file, or a weak token in it
        _fail(str(exc), code=2)
        raise


def _fail(message: str, code: int = 1) -> None:
    err.print(Text.assemble(("error:", "red"), " ", message), soft_wrap=True)
    raise typer.Exit(code)


def _settings(**overrides: Any) -> Settings:
    """Settings from the environment (+ overrides); an invalid one (a short RANKZERO_API_TOKEN) exits 2 saying why."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        problems = "; ".join(f"RANKZERO_{'_'.join(map(str, e['loc'])).upper()}: {e['msg']}" for e in exc.errors())
        _fail(f"invalid settings: {problems}", code=2)
        raise


def _private_files() -> None:
    """Everything this process and its children create (data dir, database, token, logs, runs) is owner-only."""
    os.umask(0o077)


def _run(fn: Any) -> Any:
    try:
        return fn()
    except CliError as exc:
        _fail(str(exc))


# --- running the service ---------------------------------------------------------------------


@app.command()
def up(
    port: Annotated[int | None, typer.Option(help="API port (default RANKZERO_PORT or 8000).")] = None,
    concurrency: Annotated[
        int | None,
        typer.Option(help="Jobs the worker runs at once (default RANKZERO_CONCURRENCY, else its GPUs or CPU slots)."),
    ] = None,
) -> None:
    """API + worker on this machine: SQLite and an embedded broker under RANKZERO_DATA_DIR, bound to 127.0.0.1."""
    from api.server import log_to_file, serve
    from cli.serve import start_worker_process, stop_process
    from core.migrate import upgrade

    _private_files()
    settings = _settings(**({"port": port} if port else {}))
    settings = settings.model_copy(
        update={"host": "127.0.0.1"}
    )  # `up` is the local default; `rankzero api` binds elsewhere
    settings.ensure_data_dir()
    upgrade(settings.resolved_database_url)
    try:
        token = settings.token()
    except ValueError as exc:
        _fail(str(exc), code=2)
    worker = start_worker_process(settings, concurrency, settings.data_dir / "worker.log")
    url = default_url(settings)
    api_log = settings.data_dir / "api.log"
    # Plain lines, one value each, nothing wrapped or boxed: they survive a copy-paste whole.
    for line in (
        "rankzero is up",
        f"  dashboard:  {url}/",
        f"  API docs:   {url}/docs",
        f"  API token:  {token}",
        f"  CLI:        export RANKZERO_API_TOKEN={token}",
        f"  data:       {settings.data_dir}",
        f"  logs:       {api_log}  {settings.data_dir / 'worker.log'}",
        "  Ctrl-C stops the API and the worker (running jobs checkpoint and go back to the queue)",
    ):
        console.print(Text(line), soft_wrap=True)
    record_server(settings, url)  # the CLI of this data dir finds this port (`up --port`)
    try:
        serve(settings, log_config=log_to_file(api_log))
    finally:
        forget_server(settings)
        console.print("stopping the worker (running jobs checkpoint and go back to the queue)…")
        stop_process(worker)


@app.command()
def api(
    host: Annotated[str | None, typer.Option(help="Bind address (default RANKZERO_HOST or 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default RANKZERO_PORT or 8000).")] = None,
) -> None:
    """Run only the API (uvicorn). A non-loopback --host needs RANKZERO_API_TOKEN."""
    from api.server import UnsafeBind, serve

    overrides: dict[str, Any] = {}
    if host:
        overrides["host"] = host
    if port:
        overrides["port"] = port
    _private_files()
    settings = _settings(**overrides)
    try:
        record_server(settings, default_url(settings))
        serve(settings)
    except (UnsafeBind, ValueError) as exc:
        _fail(str(exc), code=2)
    finally:
        forget_server(settings)


@app.command()
def worker(
    concurrency: Annotated[
        int | None, typer.Option("--concurrency", "-c", help="Jobs at once (default: the GPU count, at least 1).")
    ] = None,
    pool: Annotated[
        str, typer.Option(help="Celery pool: threads (default; a supervisor mostly waits), prefork or solo.")
    ] = "threads",
    loglevel: Annotated[str, typer.Option(help="Celery log level.")] = "info",
) -> None:
    """Run only a worker (Celery), using RANKZERO_BROKER_URL / RANKZERO_DATABASE_URL when set."""
    from cli.serve import run_worker

    _private_files()
    run_worker(_settings(), concurrency, pool, loglevel)


@app.command()
def scheduler() -> None:
    """Run only a scheduler candidate (every worker runs one too; one of all of them leads at a time)."""
    import logging
    import signal
    import threading

    from core.migrate import upgrade
    from worker.scheduler import start_scheduler_thread

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    settings = _settings()
    upgrade(settings.resolved_database_url)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    thread = start_scheduler_thread(settings, stop)
    try:
        while thread.is_alive():
            thread.join(1.0)
    except KeyboardInterrupt:
        stop.set()
        thread.join(10)


# --- talking to it ---------------------------------------------------------------------------


def _load_spec(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        _fail(f"cannot read {path}: {exc}")
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        _fail(f"{path} is not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {exc}")
    if not isinstance(data, dict):
        _fail(f"{path} must hold one job spec (a mapping); see `rankzero schema`")
    return data


@app.command()
def submit(
    spec: Annotated[Path, typer.Argument(help="Job spec, YAML or JSON (see `rankzero schema`).")],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Show a progress bar with live loss and ETA until the job ends.")
    ] = False,
    code: Annotated[
        Path | None,
        typer.Option(help="Pack this folder (.gitignore/.rankzeroignore honoured), upload it once, run with it."),
    ] = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Submit a job."""
    client = _api(url, token)
    body = _load_spec(spec)
    if code is not None:
        from cli.code import upload_code

        body["code"] = _run(lambda: upload_code(client, code, console))
    job = _run(lambda: client.post("/jobs", json=body))
    _print_queued(job)
    if follow:
        _follow_to_end(client, job["id"])


def _print_queued(job: dict[str, Any], note: str = "") -> None:
    # A script's batch is its own business: the built-in trainer's global batch means nothing there.
    is_script = bool((job.get("spec") or {}).get("entrypoint"))
    shape = "" if is_script else f", global batch {views.number(job['global_batch_size'])}"
    console.print(
        Text.assemble("job ", (str(job["id"]), "bold"), f" queued: {job['name']} ({job['strategy']}{shape}){note}"),
        soft_wrap=True,
    )


def _follow_to_end(client: Api, job_id: int) -> None:
    """The live progress bar until the job ends; exit 1 unless it succeeded."""
    from cli.follow import follow as follow_job

    final = _run(lambda: follow_job(client, job_id, console))
    _print_outcome(final)
    if final["status"] != "succeeded":
        raise typer.Exit(1)


def _print_outcome(job: dict[str, Any]) -> None:
    loss = f", loss {views.number(job['latest_loss'])}" if job.get("latest_loss") is not None else ""
    console.print(Text.assemble(f"job {job['id']}: ", views.status_text(job["status"]),
                                f" at step {views.steps(job)}{loss}"))  # fmt: skip
    if job.get("error"):
        console.print(views.text(job["error"], "red"), soft_wrap=True)


@app.command()
def jobs(
    status: Annotated[str | None, typer.Option(help="Only jobs in this state.")] = None,
    name: Annotated[str | None, typer.Option(help="Only jobs with this name.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many.")] = 50,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """List jobs, newest first."""
    page = _run(lambda: _api(url, token).get("/jobs", status=status, name=name, limit=limit))
    console.print(views.jobs_table(page["items"]))
    console.print(Text(f"{len(page['items'])} of {page['total']} (times in {views.local_zone()})"))


@app.command()
def show(job_id: int, url: UrlOpt = None, token: TokenOpt = None) -> None:
    """A job's details and timeline."""
    job = _run(lambda: _api(url, token).get(f"/jobs/{job_id}"))
    console.print(views.show_table(job))
    if job.get("error"):
        console.print(views.text(job["error"], "red"), soft_wrap=True)
    console.print(views.timeline_table(job.get("transitions", [])))


@app.command()
def hosts(url: UrlOpt = None, token: TokenOpt = None) -> None:
    """The hosts jobs are placed on: free GPUs or slots, what runs where, when each was last seen."""
    rows = _run(lambda: _api(url, token).get("/hosts"))
    console.print(views.hosts_table(rows) if rows else Text("(no host has registered: start a worker)"))


@app.command()
def priority(job_id: int, value: int, url: UrlOpt = None, token: TokenOpt = None) -> None:
    """Set a queued job's priority (higher runs first, -1000 … 1000)."""
    job = _run(lambda: _api(url, token).request("PATCH", f"/jobs/{job_id}", json={"priority": value}))
    console.print(Text(f"job {job['id']}: priority {job['priority']}"))


@app.command()
def logs(  # noqa: PLR0913 (one parameter per command-line option)
    job_id: int,
    rank: Annotated[int, typer.Option(help="Rank whose log to show.")] = 0,
    stream: Annotated[str, typer.Option(help="stderr or stdout.")] = "stderr",
    tail: Annotated[int | None, typer.Option(help="Only the last N bytes.")] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new output until the job ends.")
    ] = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """A rank's stdout/stderr."""
    client = _api(url, token)
    chunk = _run(lambda: client.get(f"/jobs/{job_id}/logs", rank=rank, stream=stream, tail=tail))
    console.out(chunk["text"], end="", highlight=False)  # out(): no markup, no wrapping
    printed = bool(chunk["text"])
    offset = chunk["next_offset"]
    while follow:
        chunk = _run(lambda o=offset: client.get(f"/jobs/{job_id}/logs", rank=rank, stream=stream, offset=o))
        if chunk["text"]:
            console.out(chunk["text"], end="", highlight=False)
            printed = True
        offset = chunk["next_offset"]
        if not chunk["text"]:
            if _run(lambda: client.get(f"/jobs/{job_id}"))["status"] in views.TERMINAL:
                break
            time.sleep(1.0)
    if not printed:  # on stderr: a redirected log stays the log
        err.print(f"(empty) rank {rank} {stream} of job {job_id}", style="dim", highlight=False)


@app.command()
def cancel(job_id: int, url: UrlOpt = None, token: TokenOpt = None) -> None:
    """Cancel a job (a running one checkpoints and stops within the grace period)."""
    job = _run(lambda: _api(url, token).post(f"/jobs/{job_id}/cancel"))
    console.print(f"job {job_id}: {job['status']}")


@app.command()
def checkpoints(job_id: int, url: UrlOpt = None, token: TokenOpt = None) -> None:
    """A job's checkpoints."""
    rows = _run(lambda: _api(url, token).get(f"/jobs/{job_id}/checkpoints"))
    if not rows:
        err.print(f"(empty) job {job_id} has no checkpoints yet", style="dim", highlight=False)
        return
    console.print(views.checkpoints_table(rows, _run_dir_name(job_id)))


def _run_dir_name(job_id: int) -> str:
    """The job's run dir relative to the runs dir (`job_<id>`): checkpoint paths under it are what resume_from takes."""
    from trainer.run_dir import job_run_dir

    return job_run_dir(Path(), job_id).as_posix()


@app.command()
def download(
    job_id: int,
    step: Annotated[int | None, typer.Option(help="Checkpoint step (default: the latest).")] = None,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="File to write (default: the checkpoint's name).")
    ] = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Download a job's checkpoint and verify its sha256."""
    client = _api(url, token)
    rows = _run(lambda: client.get(f"/jobs/{job_id}/checkpoints"))
    if step is not None:
        rows = [c for c in rows if c["step"] == step]
    if not rows:
        _fail(
            f"job {job_id} has no checkpoint{f' at step {step}' if step is not None else ''}: "
            f"see `rankzero checkpoints {job_id}`"
        )
    ckpt = max(rows, key=lambda c: c["step"])
    target = out or Path(Path(ckpt["path"]).name)
    digest = hashlib.sha256()
    tmp = target.with_name(target.name + ".part")

    def fetch() -> None:
        with client.stream(f"/checkpoints/{ckpt['id']}/download") as r, open(tmp, "wb") as fh:
            for block in r.iter_bytes(1 << 20):
                digest.update(block)
                fh.write(block)

    _run(fetch)
    if digest.hexdigest() != ckpt["sha256"]:
        tmp.unlink(missing_ok=True)
        _fail(
            f"sha256 mismatch for checkpoint {ckpt['id']}: got {digest.hexdigest()}, "
            f"expected {ckpt['sha256']}; try again"
        )
    tmp.replace(target)
    console.print(
        Text(f"{target}  step {ckpt['step']:,}  {ckpt['bytes']:,} bytes  sha256 {ckpt['sha256']} ✓"), soft_wrap=True
    )


@app.command()
def follow(job_id: int, url: UrlOpt = None, token: TokenOpt = None) -> None:
    """Attach to a job: the live progress bar (step, loss, ETA) until it ends; exit 1 unless it succeeded."""
    client = _api(url, token)
    job = _run(lambda: client.get(f"/jobs/{job_id}"))
    if job["status"] in views.TERMINAL:
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
    body = _run(lambda: _api(url, token).get(f"/jobs/{job_id}/metrics", name=name, max_points=2000))
    summaries = [views.series_summary(s) for s in body["series"]]
    if as_json:
        console.out(json.dumps(summaries, indent=2), highlight=False)
    elif not any(s["points"] for s in summaries):
        err.print(f"(empty) job {job_id} has no metric {name!r}" if name else f"(empty) job {job_id} has no metrics",
                  style="dim", highlight=False)  # fmt: skip
    else:
        console.print(views.metrics_table(summaries))


@app.command()
def resume(
    job_id: int,
    step: Annotated[int | None, typer.Option(help="Checkpoint step to resume from (default: the latest).")] = None,
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

    client = _api(url, token)
    job = _run(lambda: client.get(f"/jobs/{job_id}"))
    rows = [c for c in _run(lambda: client.get(f"/jobs/{job_id}/checkpoints")) if step is None or c["step"] == step]
    if not rows:
        _fail(f"job {job_id} has no checkpoint{f' at step {step}' if step is not None else ''}: "
              f"see `rankzero checkpoints {job_id}`")  # fmt: skip
    ckpt = max(rows, key=lambda c: c["step"])
    spec, how = resume_spec(
        {**job["spec"], "name": job["name"]},
        total_steps=job.get("total_steps"),
        checkpoint_step=ckpt["step"],
        resume_from=f"{_run_dir_name(job_id)}/{ckpt['path']}",
        max_steps=max_steps,
    )
    new = _run(lambda: client.post("/jobs", json=spec))
    _print_queued(new, f"\n  from job {job_id}'s checkpoint at step {ckpt['step']:,}: {how}")
    if follow_job:
        _follow_to_end(client, new["id"])


@app.command()
def schema() -> None:
    """Print the job spec's JSON Schema."""
    from trainer.spec import json_schema

    console.out(json.dumps(json_schema(), indent=2), highlight=False)


if __name__ == "__main__":
    app()
