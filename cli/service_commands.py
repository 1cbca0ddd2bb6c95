"""Service commands: run the API and the worker together (`up`), or each part alone (`api`, `worker`,
`scheduler`). Job commands are in cli/job_commands.py."""

# No `from __future__ import annotations` in a module of commands: typer reads every command's annotations
# at each start, and from strings it evaluates each four times (0.02 s of CPU per start; issue 29).

import signal
import sys
from typing import Annotated, Any

import typer

from cli.app import app, console, fail, load_settings, private_files
from cli.client import default_url, forget_server, record_server, recorded_url
from cli.views import text


def why_not_start(data_dir: str, running_url: str | None, port: int, port_free: bool) -> str | None:
    """Why `up` / `api` must not start, or None. A second instance of a data dir, or one on a taken port,
    printed "rankzero is up", failed to bind, and on its way out removed the running one's server.json
    (so the CLI lost it)."""
    if running_url:
        return (f"rankzero is already running for {data_dir} at {running_url}: use it (`rankzero jobs`), or stop it "
                "first (Ctrl-C where it runs, or `rankzero down`)")  # fmt: skip
    if not port_free:
        return f"port {port} is in use by another program: pass --port or set RANKZERO_PORT to a free one"
    return None


def port_free(host: str, port: int) -> bool:
    """Whether this process could listen on host:port now (uvicorn binds the same way, SO_REUSEADDR)."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def cli_exports(url: str, token: str) -> str:
    """The line that points a CLI in any other shell at this instance (without RANKZERO_URL, a shell
    without this RANKZERO_DATA_DIR looked for the API on port 8000)."""
    return f"export RANKZERO_URL={url} RANKZERO_API_TOKEN={token}"


def answers(url: str) -> bool:
    """Whether an API answers at `url` (a recorded pid alone may be another process's after a reboot)."""
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url}/api/health", timeout=2) as reply:
            return reply.status in (200, 503)  # 503: up, its database unreachable
    except OSError as exc:
        return getattr(exc, "code", None) == 503


def refuse_second_start(settings: Any) -> None:
    """Exit 2 saying why when `why_not_start` has a reason."""
    running = recorded_url(settings)
    why = why_not_start(str(settings.data_dir), running if running and answers(running) else None, settings.port,
                        port_free(settings.host, settings.port))  # fmt: skip
    if why:
        fail(why, code=2)


@app.command()
def up(
    port: Annotated[int | None, typer.Option(help="API port (default RANKZERO_PORT or 8000).")] = None,
    concurrency: Annotated[
        int | None,
        typer.Option(help="Jobs the worker runs at once (default RANKZERO_CONCURRENCY, else its GPUs or CPU slots)."),
    ] = None,
    detach: Annotated[
        bool,
        typer.Option(
            "--detach", "-d", help="Run in the background (a pid file in the data dir); `rankzero down` stops it."
        ),
    ] = False,
) -> None:
    """API + worker on this machine: SQLite and an embedded broker under RANKZERO_DATA_DIR, bound to 127.0.0.1."""
    from api.server import log_to_file, serve
    from cli.serve import start_worker_process, stop_process
    from core.migrate import upgrade

    private_files()
    settings = load_settings(**({"port": port} if port else {}))
    settings = settings.model_copy(
        update={"host": "127.0.0.1"}
    )  # `up` is the local default; `rankzero api` binds elsewhere
    refuse_second_start(settings)  # before the worker starts: nothing of a running instance is touched
    if detach:
        args = [*(["--port", str(port)] if port else []), *(["--concurrency", str(concurrency)] if concurrency else [])]
        _up_detached(settings, args)
        return
    settings.ensure_data_dir()
    upgrade(settings.resolved_database_url)
    try:
        token = settings.token()
    except ValueError as exc:
        fail(str(exc), code=2)
    worker = start_worker_process(settings, concurrency, settings.data_dir / "worker.log")
    url = default_url(settings)
    api_log = settings.data_dir / "api.log"
    # Plain lines, one value each, nothing wrapped or boxed: they survive a copy-paste whole.
    for line in (
        "rankzero is up",
        f"  dashboard:  {url}/",
        f"  API docs:   {url}/docs",
        f"  API token:  {token}",
        f"  CLI:        {cli_exports(url, token)}",
        f"  data:       {settings.data_dir}",
        f"  logs:       {api_log}  {settings.data_dir / 'worker.log'}",
        "  Ctrl-C stops the API and the worker (running jobs checkpoint and go back to the queue)",
    ):
        console.print(text(line), soft_wrap=True)
    record_server(settings, url)  # the CLI of this data dir finds this port (`up --port`)
    # SIGTERM (`rankzero down`, systemd's stop) as Ctrl-C: uvicorn re-raises the signal it caught once
    # it has stopped, and the default action would end this process before the worker is stopped below.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        serve(settings, log_config=log_to_file(api_log))
    except KeyboardInterrupt:
        pass
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
    private_files()
    settings = load_settings(**overrides)
    refuse_second_start(settings)
    try:
        token = settings.token()  # as `up` prints it: workers on other hosts and the CLI need it
        url = default_url(settings)
        where = "RANKZERO_API_TOKEN" if settings.api_token is not None else str(settings.data_dir / "api_token")
        if not sys.stdout.isatty():  # a log (systemd's journal, `docker compose logs`): never the token (issue 34)
            token = "<token>"
        for line in (
            "rankzero API",
            f"  API:        {url}/   (docs: {url}/docs)",
            f"  API token:  {token}" + ("" if token != "<token>" else f"  (not written to a log: it is in {where})"),
            f"  CLI:        {cli_exports(url, token)}",
            f"  workers on hosts without this runs dir: RANKZERO_API_URL={url} RANKZERO_API_TOKEN={token}",
        ):
            console.print(text(line), soft_wrap=True)
        record_server(settings, url)
        serve(settings)
    except (UnsafeBind, ValueError) as exc:
        fail(str(exc), code=2)
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

    private_files()
    run_worker(load_settings(), concurrency, pool, loglevel)


@app.command()
def scheduler() -> None:
    """Run only a scheduler candidate (every worker runs one too; one of all of them leads at a time)."""
    import logging
    import signal
    import threading

    from core.migrate import upgrade
    from worker.scheduler import start_scheduler_thread

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    settings = load_settings()
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


@app.command(hidden=True)
def healthcheck(
    part: Annotated[str, typer.Argument(help="api or worker")] = "api",
) -> None:
    """Exit 0 when this container's part is healthy (the image's and docker-compose.yml's healthchecks):
    the API answers /api/health on RANKZERO_HOST:RANKZERO_PORT; the worker, worker/health.py."""
    import urllib.request

    if part == "worker":
        from worker.health import main

        raise typer.Exit(main())
    if part != "api":
        fail(f"unknown part {part!r}: api or worker", code=2)
    settings = load_settings()
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::", "") else settings.host
    host = f"[{host}]" if ":" in host else host
    try:
        with urllib.request.urlopen(f"http://{host}:{settings.port}/api/health", timeout=4) as reply:
            ok = reply.status == 200
    except OSError as exc:
        fail(f"unhealthy: {exc}", code=1)
    if not ok:
        fail("unhealthy: /api/health did not answer 200", code=1)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _up_detached(settings: Any, args: list[str]) -> None:
    """`up --detach`: start `up` in the background, wait until its API answers, print where it is."""
    import time
    import urllib.request

    from cli import detach

    running = detach.running_pid(settings)
    if running is not None:
        fail(f"rankzero is already running here (pid {running}, {detach.pid_file(settings)}): `rankzero down` stops it")
    proc = detach.start(settings, args)
    url = default_url(settings)
    log = settings.data_dir / detach.UP_LOG
    deadline = time.monotonic() + 120
    while True:
        if proc.poll() is not None:
            detach.pid_file(settings).unlink(missing_ok=True)
            fail(f"rankzero up exited with code {proc.returncode}; its output is in {log}")
        try:
            with urllib.request.urlopen(f"{url}/api/health", timeout=2) as reply:
                if reply.status == 200:
                    break
        except OSError:
            pass
        if time.monotonic() > deadline:
            fail(f"the API did not answer at {url} within 120 s (still starting?); see {log}; `rankzero down` stops it")
        time.sleep(0.3)
    for line in (
        f"rankzero is up in the background (pid {proc.pid}, {detach.pid_file(settings)})",
        f"  dashboard:  {url}/",
        f"  API token:  {settings.token()}",
        f"  logs:       {log}  {settings.data_dir / 'api.log'}  {settings.data_dir / 'worker.log'}",
        "  `rankzero down` stops it (running jobs checkpoint and go back to the queue)",
    ):
        console.print(text(line), soft_wrap=True)


@app.command()
def down(
    timeout: Annotated[
        float, typer.Option(help="Seconds to wait for running jobs to checkpoint before SIGKILL.", min=1, max=3600)
    ] = 150.0,
) -> None:
    """Stop the instance `rankzero up --detach` started from this data dir (its jobs checkpoint and requeue)."""
    from cli import detach

    settings = load_settings()
    pid = detach.stop(settings, timeout)
    if pid is None:
        console.print(text(f"rankzero is not running here (no live pid in {detach.pid_file(settings)})"))
        return
    console.print(text(f"rankzero (pid {pid}) stopped"))
