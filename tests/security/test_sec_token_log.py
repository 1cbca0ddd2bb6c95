"""Issue 34: the API never writes the server token to its log. `rankzero api` is what systemd and Compose run,
and its output is their log (the journal, `docker compose logs`): before, its banner printed the token there
at every start. A real `rankzero api` with its output to a file, as a service manager keeps it, and requests
made with the token; then neither that output nor the data dir's logs hold it."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
from pathlib import Path

import httpx

from tests.support import deadlines
from tests.support.commands import RANKZERO
from tests.support.ports import free_port
from tests.support.services import wait_api_healthy

ROOT = Path(__file__).resolve().parents[2]


def test_the_server_token_is_not_in_the_apis_log(tmp_path: Path) -> None:
    port = free_port()
    token = "logged-" + secrets.token_urlsafe(32)
    data_dir = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RANKZERO_")}
    env |= {"RANKZERO_DATA_DIR": str(data_dir), "RANKZERO_PORT": str(port), "RANKZERO_API_TOKEN": token}
    log_path = tmp_path / "journal.log"
    with log_path.open("ab") as log:
        proc = subprocess.Popen([RANKZERO, "api"], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                                start_new_session=True)  # fmt: skip
    try:
        wait_api_healthy(f"http://127.0.0.1:{port}", [proc], log_path, 90)
        me = httpx.get(
            f"http://127.0.0.1:{port}/api/me",
            headers={"Authorization": f"Bearer {token}"},
            timeout=deadlines.seconds(10),
        )
        assert me.status_code == 200, me.text
        httpx.get(
            f"http://127.0.0.1:{port}/api/me",
            headers={"Authorization": f"Bearer {token}x"},
            timeout=deadlines.seconds(10),
        )
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    said = log_path.read_text()
    assert "API token:" in said and "RANKZERO_API_TOKEN" in said, said  # it says where the token is
    assert token not in said, "the server token is in the API's log"
    for path in data_dir.rglob("*.log"):
        assert token not in path.read_text(errors="replace"), f"the server token is in {path}"
