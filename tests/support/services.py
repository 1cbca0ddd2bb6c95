"""The service under test: the API, real Celery workers, and the whole service as a user starts it.

- `live_api`: `live_api(settings) -> base URL`, uvicorn in a thread on a free port, stopped after.
- `service`: `service(**settings_overrides) -> (settings, client)`: a live API whose settings the
  `workers` share. What a folder's tests need of it (default settings, fake or real trainer, user
  code) is its `service_options` fixture, overridden in that folder's conftest (tests/reliability).
- `workers`: `workers.start(settings, ...)` runs a real Celery worker subprocess. Every process of
  it (worker, torchrun, ranks) carries `workers.marker` in its environment (procs.py): at the end of
  the test the workers' process groups and then every process with that marker are SIGKILLed.
- `web_service`: the API and a Celery worker as a user starts them (`rankzero up` when the CLI has
  it, else uvicorn + `celery worker`), one per session, for the browser tests.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import httpx
import pytest

from tests.support.commands import CELERY, RANKZERO, ROOT
from tests.support.deadlines import deadline_in
from tests.support.jobs import TERMINAL
from tests.support.ports import free_port
from tests.support.procs import MARKER_ENV, end_everything, new_marker, stop_group
from tests.support.settings import settings_env

FAKE_TRAINER = "tests.support.fake_trainer"
DEFAULT_SETTINGS = MappingProxyType({"gpus": "", "cancel_grace_s": 5.0, "heartbeat_s": 1.0, "cpu_slots": 64})


@pytest.fixture
def live_api() -> Iterator[Callable[..., str]]:
    """Start the API (create_app(settings)) under uvicorn in a thread; returns its base URL."""
    import uvicorn

    from api.app import create_app

    servers: list[tuple[uvicorn.Server, threading.Thread]] = []

    def start(settings: Any) -> str:
        port = free_port()
        config = uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning", lifespan="on")
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
        thread.start()
        base = f"http://127.0.0.1:{port}"
        deadline = deadline_in(20)
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{base}/api/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.05)
        else:
            raise RuntimeError(f"the API did not come up on {base}")
        servers.append((server, thread))
        return base

    yield start
    for server, thread in servers:
        server.should_exit = True
        thread.join(timeout=10)


class Client:
    """The REST API as a test uses it: `http` (an httpx.Client on /api), submitting and waiting for jobs."""

    def __init__(self, base: str, token: str) -> None:
        self.http = httpx.Client(base_url=base + "/api", headers={"Authorization": f"Bearer {token}"}, timeout=30)

    def submit(self, spec: dict[str, Any]) -> dict[str, Any]:
        r = self.http.post("/jobs", json=spec)
        assert r.status_code == 201, r.text
        return r.json()

    def job(self, job_id: int) -> dict[str, Any]:
        r = self.http.get(f"/jobs/{job_id}")
        r.raise_for_status()
        return r.json()

    def wait(
        self, job_id: int, until: Callable[[dict[str, Any]], bool], timeout: float, what: str = ""
    ) -> dict[str, Any]:
        deadline = deadline_in(timeout)
        job = self.job(job_id)
        while not until(job):
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} did not reach {what or 'the state'} in {timeout} s: {job}")
            time.sleep(0.2)
            job = self.job(job_id)
        return job

    def wait_terminal(self, job_id: int, timeout: float = 120) -> dict[str, Any]:
        return self.wait(job_id, lambda j: j["status"] in TERMINAL, timeout, "a terminal state")


@dataclass(frozen=True)
class ServiceOptions:
    """What `service` and `workers` give a folder's tests.

    settings: defaults of every `service(**overrides)` call.
    fake_trainer: workers launch tests/support/fake_trainer.py unless `workers.start(fake=False)`;
    False: the real trainer (`-m trainer`) unless `fake=True`.
    """

    settings: Mapping[str, Any] = field(default_factory=lambda: DEFAULT_SETTINGS)
    fake_trainer: bool = True


class Workers:
    """Real Celery workers as subprocesses, each in a session (process group) of its own."""

    def __init__(self, tmp_path: Path, options: ServiceOptions | None = None) -> None:
        self.tmp_path = tmp_path
        self.options = options or ServiceOptions()
        self.procs: list[subprocess.Popen[bytes]] = []
        self.runs_dirs: set[Path] = set()  # where their attempts' disk filesystems are (worker/sandbox_disk.py)
        # Inherited by the workers, torchrun and every rank: tells this test's processes apart from
        # any other run's on the same machine (other suites launch job 1 too).
        self.marker = new_marker()

    def start(
        self,
        settings: Any,
        *,
        fake: bool | None = None,
        pool: str = "solo",
        concurrency: int = 1,
        name: str | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """A worker on `settings`; `fake`: the stand-in trainer (default: the folder's `service_options`)."""
        env = settings_env(settings, **{"PYTHONPATH": str(ROOT), **(extra_env or {})})
        env[MARKER_ENV] = self.marker
        if self.options.fake_trainer if fake is None else fake:
            env["RANKZERO_TRAINER_MODULE"] = FAKE_TRAINER
        n = len(self.procs)
        cmd = [CELERY, "-A", "worker.celery_app", "worker", f"--pool={pool}", "-c", str(concurrency),
               "-l", "info", "-n", name or f"w{n}-{os.getpid()}@%h",
               "--without-gossip", "--without-mingle", "--without-heartbeat"]  # fmt: skip
        with open(self.tmp_path / f"worker{n}.log", "ab") as log:
            proc = subprocess.Popen(
                cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.procs.append(proc)
        self.runs_dirs.add(Path(settings.resolved_runs_dir))
        return proc

    def stop(self, proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL, timeout: float = 30) -> None:
        stop_group(proc, sig, timeout)

    def log(self, n: int = 0) -> str:
        return (self.tmp_path / f"worker{n}.log").read_text(errors="replace")


@pytest.fixture
def service_options() -> ServiceOptions:
    return ServiceOptions()


@pytest.fixture
def workers(tmp_path: Path, service_options: ServiceOptions) -> Iterator[Workers]:
    w = Workers(tmp_path, service_options)
    yield w
    for proc in w.procs:
        w.stop(proc, signal.SIGKILL)  # the worker's group
    # torchrun and ranks live in sessions of their own: find them by this test's marker.
    end_everything(w.marker)
    from worker import sandbox_disk

    for runs_dir in w.runs_dirs:  # a killed worker's attempt leaves its disk filesystem mounted: the host keeps none
        sandbox_disk.recover(runs_dir)


@pytest.fixture
def service(
    api_settings: Callable[..., Any], live_api: Callable[..., str], service_options: ServiceOptions
) -> Callable[..., tuple[Any, Client]]:
    """`service(**settings_overrides) -> (settings, client)`: a live API; start workers with `workers`."""

    def start(**overrides: Any) -> tuple[Any, Client]:
        settings = api_settings(**{**service_options.settings, **overrides})
        return settings, Client(live_api(settings), settings.token())

    return start


WEB_TOKEN = "rankzero-web-test-token-3f9a1c0123456789abcdef"


@dataclass
class WebService:
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

        return Settings(data_dir=self.data_dir, api_token=self.token)

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.base, headers={"Authorization": f"Bearer {self.token}"}, timeout=30)

    def start(self, cmd: list[str], env: dict[str, str]) -> None:
        assert self.log is not None
        with open(self.log, "ab") as out:
            # Own session = own process group, so stopping it reaches torchrun and its ranks too.
            self.procs.append(
                subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            )

    def wait_healthy(self, timeout: float = 90) -> None:
        assert self.log is not None
        wait_api_healthy(self.base, self.procs, self.log, timeout)


def wait_api_healthy(base: str, procs: list[subprocess.Popen[bytes]], log: Path, timeout: float = 90) -> None:
    """Wait until the API at `base` answers /api/health, failing with the tail of its log as soon as one of
    `procs` (the processes serving it) has died, or at the (scaled) deadline."""
    deadline = deadline_in(timeout)
    while True:
        try:
            if httpx.get(f"{base}/api/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        dead = [p for p in procs if p.poll() is not None]
        if dead or time.monotonic() > deadline:
            raise RuntimeError(f"the API at {base} did not come up; its log:\n{log.read_text()[-4000:]}")
        time.sleep(0.2)


def _cli_has_up() -> bool:
    cli = ROOT / "cli" / "main.py"
    return cli.exists() and "def up" in cli.read_text()


@pytest.fixture(scope="session")
def web_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebService]:
    data_dir = tmp_path_factory.mktemp("rankzero-web")
    port = free_port()
    env = {
        **os.environ,
        "RANKZERO_DATA_DIR": str(data_dir),
        "RANKZERO_API_TOKEN": WEB_TOKEN,
        "RANKZERO_HOST": "127.0.0.1",
        "RANKZERO_PORT": str(port),
        "RANKZERO_GPUS": "",
        "RANKZERO_WEBHOOK_ALLOW_PRIVATE": "true",  # the Webhooks page's test points a hook at its loopback receiver
        "PYTHONUNBUFFERED": "1",
    }
    for key in ("RANKZERO_DATABASE_URL", "RANKZERO_BROKER_URL", "RANKZERO_RUNS_DIR"):
        env.pop(key, None)
    svc = WebService(base=f"http://127.0.0.1:{port}", data_dir=data_dir, token=WEB_TOKEN, log=data_dir / "service.log")
    if _cli_has_up():
        svc.start([RANKZERO, "up"], env)
    else:
        uvicorn = [sys.executable, "-m", "uvicorn", "api.app:create_app", "--factory",
                   "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]  # fmt: skip
        svc.start(uvicorn, env)
        svc.start([sys.executable, "-m", "celery", "-A", "worker.celery_app", "worker", "--concurrency", "2",
                   "--loglevel", "WARNING"], env)  # fmt: skip
    try:
        svc.wait_healthy()
        yield svc
    finally:
        for proc in reversed(svc.procs):
            stop_group(proc, signal.SIGTERM, 15)
