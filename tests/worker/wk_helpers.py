"""Helpers for the worker tests (imported by conftest and the tests): subprocess workers, a REST client, specs."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from cli.serve import settings_env as settings_env_of_cli

ROOT = Path(__file__).resolve().parents[2]
FAKE_DIR = Path(__file__).resolve().parent
CELERY = str(Path(sys.executable).with_name("celery"))
TERMINAL = {"succeeded", "failed", "cancelled"}


def settings_env(settings: Any, **extra: str) -> dict[str, str]:
    """The environment that gives a subprocess exactly `settings`."""
    env = settings_env_of_cli(settings)
    env.update({
        "RANKZERO_GPUS": settings.gpus if settings.gpus is not None else "",  # never the host's GPUs in tests
        "RANKZERO_POLL_S": "0.1",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(FAKE_DIR)]),
    })  # fmt: skip
    env.update(extra)
    return env


class Workers:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.procs: list[subprocess.Popen[bytes]] = []
        # Inherited by the workers, torchrun and every rank: tells this test's processes apart from
        # any other run's on the same machine (other suites launch job 1 too).
        self.token = secrets.token_hex(8)

    def start(self, settings: Any, *, fake: bool = True, pool: str = "solo", concurrency: int = 1, name: str | None = None,
              extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:  # fmt: skip
        env = settings_env(settings, **(extra_env or {}))
        env["RANKZERO_TEST_RUN"] = self.token
        if fake:
            env["RANKZERO_TRAINER_MODULE"] = "fake_trainer"
        n = len(self.procs)
        log = open(self.tmp_path / f"worker{n}.log", "ab")
        cmd = [CELERY, "-A", "worker.celery_app", "worker", f"--pool={pool}", "-c", str(concurrency), "-l", "info",
               "-n", name or f"w{n}-{os.getpid()}@%h", "--without-gossip", "--without-mingle", "--without-heartbeat"]  # fmt: skip
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL, timeout: float = 30) -> None:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def log(self, n: int = 0) -> str:
        return (self.tmp_path / f"worker{n}.log").read_text(errors="replace")


class Client:
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
        deadline = time.monotonic() + timeout
        job = self.job(job_id)
        while not until(job):
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} did not reach {what or 'the state'} in {timeout} s: {job}")
            time.sleep(0.2)
            job = self.job(job_id)
        return job

    def wait_terminal(self, job_id: int, timeout: float = 120) -> dict[str, Any]:
        return self.wait(job_id, lambda j: j["status"] in TERMINAL, timeout, "a terminal state")


def fake_spec(name: str = "fake", **kw: Any) -> dict[str, Any]:
    args = kw.pop("args", {})
    spec = {"name": name, "model": {"name": "mlp", "args": {"step_s": 0.02, **args}}, "data": {"name": "digits"},
            "batch_size": 8, "max_steps": 20, "device": "cpu", "checkpoint": {"every_steps": 5, "every_epochs": None}}  # fmt: skip
    spec.update(kw)
    return spec


def _env_of(pid: str) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return []


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def run_pids(token: str, job_id: int | None = None) -> list[int]:
    """Live processes started under one Workers (optionally: only job `job_id`'s torchrun and ranks)."""
    mine = f"RANKZERO_TEST_RUN={token}".encode()
    job = f"RANKZERO_JOB_MARK={job_id}-".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        env = _env_of(entry.name)
        if mine in env and (job_id is None or any(v.startswith(job) for v in env)) and alive(int(entry.name)):
            found.append(int(entry.name))
    return found
