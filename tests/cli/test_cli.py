"""`rankzero` as a user runs it: a real process talking REST to a live API and a real worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.support.commands import ROOT
from tests.support.deadlines import deadline_in
from tests.support.jobs import fake_spec

RANKZERO = str(Path(sys.executable).with_name("rankzero"))


def _cli(*args: str, url: str | None = None, token: str | None = None, env: dict | None = None, timeout: float = 90):
    e = dict(os.environ) | (env or {})
    if url:
        e["RANKZERO_URL"] = url
    if token:
        e["RANKZERO_API_TOKEN"] = token
    e["COLUMNS"] = "200"
    return subprocess.run([RANKZERO, *args], capture_output=True, text=True, env=e, cwd=ROOT, timeout=timeout)


def test_submit_follow_jobs_show_checkpoints_download_cancel(service, workers, tmp_path):
    settings, client = service()
    workers.start(settings)
    url, token = str(client.http.base_url).removesuffix("/api/").removesuffix("/api"), settings.token()
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump(fake_spec("cli-job", nproc=2)))
    r = _cli("submit", str(spec), "--follow", url=url, token=token)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "job 1 queued" in r.stdout and "succeeded" in r.stdout and "loss" in r.stdout
    r = _cli("jobs", url=url, token=token)
    assert "cli-job" in r.stdout and "succeeded" in r.stdout
    r = _cli("show", "1", url=url, token=token)
    assert "timeline" in r.stdout and "running" in r.stdout
    r = _cli("checkpoints", "1", url=url, token=token)
    assert "step_00000020.pt" in r.stdout
    out = tmp_path / "ck.pt"
    r = _cli("download", "1", "-o", str(out), url=url, token=token)
    assert r.returncode == 0 and out.exists() and "✓" in r.stdout, r.stdout + r.stderr
    r = _cli("logs", "1", "--rank", "1", url=url, token=token)
    assert r.returncode == 0
    r = _cli("cancel", "1", url=url, token=token)
    assert r.returncode == 1 and "error" in r.stderr  # already finished: the API says 409


def test_bad_token_and_unreachable_server_say_what_to_do(service):
    _, client = service()
    url = str(client.http.base_url).removesuffix("/api/").removesuffix("/api")
    r = _cli("jobs", url=url, token="wrong-token-" + "0" * 32)
    assert r.returncode == 1 and "RANKZERO_API_TOKEN" in r.stderr
    r = _cli("jobs", url="http://127.0.0.1:9", token="unreachable-server-token-" + "0" * 32)
    assert r.returncode == 1 and "rankzero up" in r.stderr


def test_invalid_spec_shows_the_field(service, tmp_path):
    settings, client = service()
    url = str(client.http.base_url).removesuffix("/api/").removesuffix("/api")
    spec = tmp_path / "bad.json"
    spec.write_text(json.dumps(fake_spec(optimizer={"lr": -1})))
    r = _cli("submit", str(spec), url=url, token=settings.token())
    assert r.returncode == 1 and "optimizer.lr" in r.stderr


def test_schema_prints_the_job_spec_schema():
    r = _cli("schema")
    assert r.returncode == 0 and "JobSpec" in json.loads(r.stdout)["title"]


def test_api_refuses_public_bind_without_token(tmp_path):
    e = {k: v for k, v in os.environ.items() if k != "RANKZERO_API_TOKEN"} | {"RANKZERO_DATA_DIR": str(tmp_path)}
    r = subprocess.run(
        [RANKZERO, "api", "--host", "0.0.0.0", "--port", "8799"], capture_output=True, text=True, env=e, timeout=60
    )
    assert r.returncode == 2 and "RANKZERO_API_TOKEN" in r.stderr


def test_up_prints_url_and_token_and_its_worker_dies_with_it(tmp_path):
    import signal
    import time

    import httpx

    from core.settings import Settings
    from tests.support.procs import alive

    port = Settings().port + 1000 + os.getpid() % 1000
    e = {k: v for k, v in os.environ.items() if not k.startswith("RANKZERO_")}
    e |= {"RANKZERO_DATA_DIR": str(tmp_path), "RANKZERO_PORT": str(port), "RANKZERO_GPUS": ""}
    up = subprocess.Popen(
        [RANKZERO, "up"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=e, text=True, start_new_session=True
    )
    try:
        deadline = deadline_in(60)
        while b" ready." not in ((tmp_path / "worker.log").read_bytes() if (tmp_path / "worker.log").exists() else b""):
            assert time.monotonic() < deadline and up.poll() is None, "rankzero up did not start its worker"
            time.sleep(0.2)
        token = (tmp_path / "api_token").read_text().strip()
        for _ in range(3):  # requests go to the API's log file, not over the banner
            httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=10)
        worker_pid = int(subprocess.run(["pgrep", "-P", str(up.pid)], capture_output=True, text=True).stdout.split()[0])
        os.kill(up.pid, signal.SIGKILL)  # even a killed `up` must not leave its worker behind
        out = up.communicate(timeout=10)[0]
        assert f"  dashboard:  http://127.0.0.1:{port}/\n" in out and f"  API token:  {token}\n" in out, out
        assert "GET /api/health" not in out, out
        assert "GET /api/health" in (tmp_path / "api.log").read_text()
        deadline = deadline_in(30)
        while alive(worker_pid):
            assert time.monotonic() < deadline, "the worker outlived rankzero up"
            time.sleep(0.2)
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)
