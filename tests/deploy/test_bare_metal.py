"""A GPU box without Docker: deploy/rankzero.service passes `systemd-analyze verify` (its paths pointed
at this checkout), deploy/logrotate passes `logrotate --debug`, and `rankzero up --detach` starts an
instance in the background that `rankzero down` stops cleanly (API, worker and pid file gone)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support import deadlines
from tests.support.ports import free_port
from tests.support.procs import alive, end_everything, new_marker, processes

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
RANKZERO = str(Path(sys.executable).with_name("rankzero"))


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_unit_file_verifies(tmp_path: Path) -> None:
    unit = (ROOT / "deploy/rankzero.service").read_text()
    assert "ExecStart=/opt/rankzero/.venv/bin/rankzero up" in unit and "KillMode=mixed" in unit
    local = unit.replace("/opt/rankzero/.venv/bin/rankzero", RANKZERO).replace("/opt/rankzero", str(ROOT))
    path = tmp_path / "rankzero.service"
    path.write_text(local)
    done = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True, timeout=60)
    problems = [line for line in done.stderr.splitlines() if "rankzero.service" in line]
    assert done.returncode == 0 and not problems, done.stderr


@pytest.mark.skipif(shutil.which("logrotate") is None, reason="logrotate is not installed")
def test_logrotate_file_parses(tmp_path: Path) -> None:
    text = (ROOT / "deploy/logrotate").read_text().replace("/var/lib/rankzero", str(tmp_path))
    text = text.replace("    su rankzero rankzero\n", "").replace("create 0600 rankzero rankzero", "create 0600")
    conf = tmp_path / "rankzero.conf"
    conf.write_text(text)
    for name in ("api.log", "worker.log"):
        (tmp_path / name).write_text("line\n")
    state = tmp_path / "state"
    done = subprocess.run(["logrotate", "--debug", "--force", "--state", str(state), str(conf)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0 and "error" not in done.stderr.lower(), done.stderr


def test_detached_instance_stops_cleanly(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RANKZERO_")}
    marker = new_marker()  # on `up`, its worker and anything they start
    env |= {"RANKZERO_DATA_DIR": str(tmp_path), "RANKZERO_PORT": str(port), "RANKZERO_GPUS": "none",
            "RANKZERO_TEST_RUN": marker}  # fmt: skip
    up = subprocess.run([RANKZERO, "up", "--detach"], env=env, capture_output=True, text=True, timeout=180)
    pid_file = tmp_path / "rankzero.pid"
    try:
        assert up.returncode == 0, up.stdout + up.stderr + _tail(tmp_path / "up.log")
        assert "rankzero down" in up.stdout
        pid = int(pid_file.read_text())
        assert alive(pid)
        assert httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=deadlines.seconds(10)).status_code == 200
        again = subprocess.run([RANKZERO, "up", "--detach"], env=env, capture_output=True, text=True, timeout=60)
        assert again.returncode != 0 and "already running" in again.stdout + again.stderr

        down = subprocess.run([RANKZERO, "down"], env=env, capture_output=True, text=True, timeout=200)
        assert down.returncode == 0 and "stopped" in down.stdout, down.stdout + down.stderr
        assert not alive(pid) and not pid_file.exists()
        assert processes(marker) == []  # the worker too
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=2)
        log = _tail(tmp_path / "up.log")
        assert "stopping the worker" in log, log  # `up`'s own orderly shutdown ran, not a SIGKILL
        again = subprocess.run([RANKZERO, "down"], env=env, capture_output=True, text=True, timeout=60)
        assert again.returncode == 0 and "not running" in again.stdout
    finally:
        if pid_file.exists():  # a failed assertion: end what this test started, by its pid
            subprocess.run([RANKZERO, "down", "--timeout", "5"], env=env, capture_output=True, timeout=60)
        end_everything(marker)


def _tail(path: Path) -> str:
    return path.read_text(errors="replace")[-4000:] if path.exists() else ""
