"""Browser fixtures: the real service in subprocesses and Debian's chromium driven by Playwright.

- `service`: the API and a Celery worker (`rankzero up` when the CLI has it, else uvicorn +
  `celery worker`), on a free port with a temp data dir and a known token; one per test session,
  stopped by process group (only the processes started here).
- `browser`: headless /usr/bin/chromium (no Playwright browser download).
- `page`: a 1280×800 page, already signed in, that fails the test on any console error or
  uncaught page error.
- `db`: a SQLModel session on the service's database, for seeding rows the way the worker would.
- `shot(page, name)`: a full-page screenshot under test-output/screenshots/.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from web_helpers import ALLOWED_HTTP_ERRORS, SCREENSHOTS

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
TOKEN = "web-test-token-3f9a1c"
VIEWPORT = {"width": 1280, "height": 800}

pytestmark = pytest.mark.browser


@dataclass
class Service:
    base: str
    data_dir: Path
    token: str
    procs: list[subprocess.Popen] = field(default_factory=list)
    log: Path | None = None

    @property
    def database_url(self) -> str:
        return f"sqlite:///{self.data_dir / 'rankzero.db'}"

    @property
    def runs_dir(self) -> Path:
        return self.data_dir / "runs"

    def settings(self):
        from core.settings import Settings

        return Settings(data_dir=self.data_dir, api_token=TOKEN)

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.base, headers={"Authorization": f"Bearer {self.token}"}, timeout=30)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cli_has_up() -> bool:
    cli = REPO / "cli" / "main.py"
    return cli.exists() and "def up" in cli.read_text()


def _start(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        # Own session = own process group, so stopping it reaches torchrun and its ranks too.
        return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)
    except ProcessLookupError:
        pass


@pytest.fixture(scope="session")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    data_dir = tmp_path_factory.mktemp("rankzero-web")
    port = free_port()
    env = {
        **os.environ,
        "RANKZERO_DATA_DIR": str(data_dir),
        "RANKZERO_API_TOKEN": TOKEN,
        "RANKZERO_HOST": "127.0.0.1",
        "RANKZERO_PORT": str(port),
        "RANKZERO_GPUS": "",
        "PYTHONUNBUFFERED": "1",
    }
    for key in ("RANKZERO_DATABASE_URL", "RANKZERO_BROKER_URL", "RANKZERO_RUNS_DIR"):
        env.pop(key, None)
    log = data_dir / "service.log"
    bin_dir = Path(sys.executable).parent
    svc = Service(base=f"http://127.0.0.1:{port}", data_dir=data_dir, token=TOKEN, log=log)
    if _cli_has_up():
        svc.procs.append(_start([str(bin_dir / "rankzero"), "up"], env, log))
    else:
        svc.procs.append(
            _start(
                [
                    sys.executable,
                    "-m",
                    "uvicorn",
                    "api.app:create_app",
                    "--factory",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--log-level",
                    "warning",
                ],
                env,
                log,
            )
        )
        svc.procs.append(
            _start(
                [
                    sys.executable,
                    "-m",
                    "celery",
                    "-A",
                    "worker.celery_app",
                    "worker",
                    "--concurrency",
                    "2",
                    "--loglevel",
                    "WARNING",
                ],
                env,
                log,
            )
        )
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(f"{svc.base}/api/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            dead = [p for p in svc.procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"the service did not come up; its log:\n{log.read_text()[-4000:]}")
            time.sleep(0.3)
        yield svc
    finally:
        for proc in reversed(svc.procs):
            _stop(proc)


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is not installed: run `make chromium` (make test does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        yield b
        b.close()


class ConsoleErrors(list):
    """Console errors and uncaught exceptions of a page."""


def watch_console(page) -> ConsoleErrors:
    errors = ConsoleErrors()

    def on_console(msg) -> None:
        if msg.type != "error":
            return
        url = (msg.location or {}).get("url", "")
        # Chrome logs every non-2xx fetch as "Failed to load resource"; a test that provokes one
        # on purpose (a 422 for a bad spec) says so with allow_http_error(page, 422, "/api/jobs").
        if any(
            f"status of {status} " in msg.text and part in url for status, part in ALLOWED_HTTP_ERRORS.get(id(page), [])
        ):
            return
        errors.append(f"console.{msg.type}: {msg.text} @ {url}")

    page.on("console", on_console)
    page.on("pageerror", lambda exc: errors.append(f"pageerror: {exc}"))
    return errors


@pytest.fixture
def new_page(browser, service):
    """Factory for pages that fail the test on console errors; signed in unless told otherwise."""
    contexts = []
    watched: list[ConsoleErrors] = []

    def make(signed_in: bool = True, viewport: dict | None = None, **context_options):
        state = None
        if signed_in:
            state = _signed_in_state(browser, service)
        context = browser.new_context(
            viewport=viewport or VIEWPORT, storage_state=state, accept_downloads=True, **context_options
        )
        context.set_default_timeout(15_000)
        contexts.append(context)
        page = context.new_page()
        watched.append(watch_console(page))
        return page

    yield make
    for context in contexts:
        context.close()
    errors = [e for errs in watched for e in errs]
    assert not errors, "the browser logged errors:\n" + "\n".join(errors)


_STATE: dict = {}


def _signed_in_state(browser, service: Service) -> dict:
    if "state" not in _STATE:
        context = browser.new_context(viewport=VIEWPORT)
        page = context.new_page()
        errors = watch_console(page)
        page.goto(f"{service.base}/login")
        page.fill("#token", service.token)
        page.click("button[type=submit]")
        page.wait_for_url(f"{service.base}/")
        _STATE["state"] = context.storage_state()
        context.close()
        assert not errors, errors
    return _STATE["state"]


@pytest.fixture
def page(new_page):
    return new_page()


@pytest.fixture
def db(service: Service) -> Iterator[object]:
    from sqlmodel import Session

    from core.db import get_engine

    with Session(get_engine(service.database_url)) as session:
        yield session


@pytest.fixture(scope="session", autouse=True)
def _fresh_screenshots() -> None:
    if SCREENSHOTS.exists():
        shutil.rmtree(SCREENSHOTS)
