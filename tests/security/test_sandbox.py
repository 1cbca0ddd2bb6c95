"""Issue 19 item 1: a job is a sandbox. Real launches (worker/launch.py, as the supervisor calls it) of a
probe job (tests/support/sandbox_job.py) that tries what the red team did: read the service's secrets
and state, see or signal the worker, rewrite the shared bundle cache, and leave a process behind (a new
session, a double fork, an empty environment) that outlives the job or its memory limit.

This test process plays the worker: its environment holds the secrets, its pid is the one to reach."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.deadlines import deadline_in
from worker import sandbox

pytestmark = pytest.mark.skipif(sandbox.probe() is not None, reason=f"no sandbox here: {sandbox.probe()}")

TOKEN = "sandbox-test-token-" + secrets.token_hex(16)
DB_PASSWORD = "db-password-" + secrets.token_hex(8)


@pytest.fixture
def worker_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANKZERO_API_TOKEN", TOKEN)
    monkeypatch.setenv("RANKZERO_DATABASE_URL", f"postgresql://rankzero:{DB_PASSWORD}@127.0.0.1:5432/rankzero")
    monkeypatch.setenv("RANKZERO_TRAINER_MODULE", "tests.support.sandbox_job")
    monkeypatch.delenv("RANKZERO_SANDBOX", raising=False)


class Job:
    def __init__(self, settings: Any, run: Any, launched: Any) -> None:
        self.settings, self.run, self.launched = settings, run, launched

    def result(self, rank: int = 0, timeout_s: float = 120.0) -> dict[str, Any]:
        path = self.run.root / f"probe_rank{rank}.json"
        deadline = deadline_in(timeout_s)
        while not path.exists():
            assert self.launched.proc.poll() is None or path.exists(), self.launched.launcher_log.read_text()
            assert time.monotonic() < deadline, "the probe wrote nothing"
            time.sleep(0.1)
        return json.loads(path.read_text())

    def wait(self, timeout_s: float = 120.0) -> int:
        return self.launched.proc.wait(timeout=timeout_s)

    def cancel(self) -> int:
        """What a cancel does to the attempt (worker/procs.py stop): SIGTERM its process group."""
        os.killpg(self.launched.proc.pid, signal.SIGTERM)
        return self.wait()


@pytest.fixture
def launch_probe(worker_env: None, tmp_path: Path) -> Iterator[Callable[..., Job]]:
    from core.settings import Settings
    from trainer.run_dir import RunDir
    from worker.launch import launch

    started: list[Job] = []

    def start(ask: dict[str, Any], *, job_id: int = 1, code_dir: Path | None = None, **spec: Any) -> Job:
        settings = Settings(data_dir=tmp_path / "data", sandbox="on")
        run = RunDir(settings.resolved_runs_dir / f"job_{job_id}")
        run.root.mkdir(parents=True, exist_ok=True)
        (run.root / "probe.json").write_text(json.dumps(ask))
        launched = launch(run, {"name": "probe", **spec}, job_id, 1, 1, None, settings, code_dir=code_dir)
        job = Job(settings, run, launched)
        started.append(job)
        return job

    yield start
    for job in started:
        if job.launched.proc.poll() is None:
            os.killpg(job.launched.proc.pid, signal.SIGKILL)
            job.launched.proc.wait(timeout=30)


_escapees: list[str] = []


@pytest.fixture(autouse=True)
def _no_escapee_outlives_the_test() -> Iterator[None]:
    """Whatever the outcome (on a host or code without the sandbox they do outlive the job)."""
    yield
    for token in _escapees:
        for pid in _processes_with(token):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    _escapees.clear()


def _escapee_token() -> str:
    _escapees.append(token := f"escapee-{secrets.token_hex(8)}")
    return token


def _processes_with(token: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if token.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _gone(token: str, timeout_s: float = 30.0) -> bool:
    deadline = deadline_in(timeout_s)
    while _processes_with(token):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_a_job_cannot_reach_the_services_secrets_other_jobs_or_the_bundle_cache(launch_probe, tmp_path: Path) -> None:
    from core.settings import Settings
    from worker.bundles import cache_dir

    settings = Settings(data_dir=tmp_path / "data")
    data = settings.ensure_data_dir()
    (data / "api_token").write_text(TOKEN)
    (data / "rankzero.db").write_text("SQLite format 3 (the service's database)")
    other_run = settings.resolved_runs_dir / "job_2"
    other_run.mkdir(parents=True)
    (other_run / "model.pt").write_text("another job's weights")
    own_bundle, other_bundle = cache_dir(settings) / ("a" * 64), cache_dir(settings) / ("b" * 64)
    for folder in (own_bundle, other_bundle):
        folder.mkdir(parents=True)
        (folder / "train.py").write_text("print('the code the user uploaded')\n")
    own_run = settings.resolved_runs_dir / "job_1"
    datasets = settings.resolved_datasets_dir  # another job's data set there
    (datasets / "mnist").mkdir(parents=True)
    (datasets / "mnist" / "train.bin").write_text("the data every job reads")
    ask = {
        "read": [str(data / "api_token"), str(data / "rankzero.db"), str(other_run / "model.pt"),
                 str(other_bundle / "train.py"), str(own_bundle / "train.py")],
        "write": [str(own_bundle / "train.py"), str(cache_dir(settings) / "planted.py"), str(own_run / "mine.txt"),
                  str(datasets / "mnist" / "train.bin"), str(datasets / "planted.bin")],
        "pids": [os.getpid()],
        "secrets": [TOKEN, DB_PASSWORD],
    }  # fmt: skip
    job = launch_probe(ask, code_dir=own_bundle)
    seen = job.result()
    assert job.wait() == 0, job.launched.launcher_log.read_text()

    read = seen["read"]
    for secret in ask["read"][:4]:
        assert read[secret] != "read", f"the job read {secret}"
    assert read[str(own_bundle / "train.py")] == "read"  # its own code it sees
    written = seen["write"]
    assert written[str(own_bundle / "train.py")] != "written"  # its bundle is read-only
    assert (own_bundle / "train.py").read_text() == "print('the code the user uploaded')\n"
    assert not (cache_dir(settings) / "planted.py").exists()  # (a write there lands in its private view only)
    assert written[str(own_run / "mine.txt")] == "written"  # its own run dir it may write
    for data_file in ask["write"][3:]:  # the data sets are read-only: no job changes what another reads
        assert written[data_file] != "written", f"the job wrote {data_file}"
    assert (datasets / "mnist" / "train.bin").read_text() == "the data every job reads"
    assert not (datasets / "planted.bin").exists()
    assert seen["signal"][str(os.getpid())] == "ProcessLookupError"  # the worker is not even in sight
    assert seen["environ_secrets"] == []  # no /proc/<pid>/environ it can read holds a secret


@pytest.mark.parametrize("end", ["success", "failure", "cancel"])
def test_an_escaped_process_is_gone_when_the_attempt_ends(launch_probe, end: str) -> None:
    token = _escapee_token()
    ask = {"escape": {"token": token, "mb": 8}, "end": {"success": 0, "failure": 3, "cancel": "hang"}[end]}
    job = launch_probe(ask)
    job.result()
    assert _processes_with(token), "the probe's escapee did not start"
    code = job.cancel() if end == "cancel" else job.wait()
    assert (code == 0) == (end == "success"), job.launched.launcher_log.read_text()  # torchrun: 1 when a rank fails
    assert _gone(token), f"a process the job started in a session of its own outlived its {end}"


def test_an_escaped_process_counts_against_the_memory_limit(launch_probe) -> None:
    token = _escapee_token()
    job = launch_probe({"escape": {"token": token, "mb": 1536}, "end": "hang"}, memory_limit_mb=1024)
    job.result()
    assert _gone(token, timeout_s=120), "a 1.5 GiB process outside the job's session lived under its 1 GiB limit"
    assert job.launched.proc.poll() is None  # the limit took the escapee, not the end of the job
    assert sandbox.oom_kills(job.launched.mark) >= 1
    job.cancel()
