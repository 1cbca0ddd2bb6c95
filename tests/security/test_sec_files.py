"""Hardening 7: the data dir, database, token file and logs were world-readable (umask 022).
Attack: another local user reads ~/.rankzero/api_token (the API token) or the database."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx

from api.app import create_app
from core.settings import Settings
from tests.support.deadlines import deadline_in

REPO = Path(__file__).resolve().parents[2]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_rankzero_api_creates_owner_only_files_under_a_lax_umask(tmp_path: Path) -> None:
    data = tmp_path / "home" / ".rankzero"
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RANKZERO_")} | {"RANKZERO_DATA_DIR": str(data)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "api", "--port", str(port)], env=env, cwd=REPO,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=lambda: os.umask(0o022),
    )  # fmt: skip
    try:
        deadline = deadline_in(60)
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        else:
            raise AssertionError(f"the API did not start: {proc.stderr.read() if proc.poll() is not None else ''}")
        modes = {p.name: oct(_mode(p)) for p in [data, *data.iterdir()]}
        print(modes)
        assert _mode(data) == 0o700, modes
        assert _mode(data / "api_token") == 0o600 and _mode(data / "rankzero.db") == 0o600, modes
        assert all(_mode(p) & 0o077 == 0 for p in data.iterdir()), modes
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_an_existing_lax_data_dir_is_tightened(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    data.chmod(0o755)
    db = data / "rankzero.db"
    db.touch()
    db.chmod(0o644)
    create_app(Settings(data_dir=data, database_url=f"sqlite:///{db}", broker_url=f"sqla+sqlite:///{tmp_path}/b.db"))
    assert _mode(data) == 0o700 and _mode(db) == 0o600 and _mode(data / "api_token") == 0o600


def test_worker_log_is_owner_only(tmp_path: Path) -> None:
    from cli.serve import open_private_log

    old = os.umask(0o022)
    try:
        with open_private_log(tmp_path / "logs" / "worker.log") as log:
            log.write(b"x")
    finally:
        os.umask(old)
    assert _mode(tmp_path / "logs" / "worker.log") == 0o600 and _mode(tmp_path / "logs") == 0o700
