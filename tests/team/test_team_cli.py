"""The team from the command line (issue 23): an admin adds a user (her token printed once), she logs in
(URL and token saved owner-only as a profile), and a fresh terminal finds the instance from the profile."""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

from tests.support.commands import RANKZERO
from tests.support.services import Client


def _cli(*args: str, env: dict[str, str]) -> str:
    out = subprocess.run([RANKZERO, *args], capture_output=True, text=True, timeout=120, env=env, check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_users_add_prints_a_token_login_saves_a_private_profile_the_cli_then_uses(service, tmp_path: Path) -> None:
    settings, admin = service()
    base = str(admin.http.base_url).removesuffix("/api/").removesuffix("/api")
    config = tmp_path / "config"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RANKZERO_")}
    env |= {"RANKZERO_CONFIG_DIR": str(config), "RANKZERO_DATA_DIR": str(tmp_path / "elsewhere"), "COLUMNS": "200"}

    added = _cli("users", "add", "carol", "--role", "member", "--url", base, "--token", settings.token(), env=env)
    token = re.search(r"^([A-Za-z0-9_-]{43})$", added, re.MULTILINE)
    assert token is not None and "Shown once" in added, added

    _cli("login", base, "--token", token[1], env=env)
    saved = config / "profiles.json"
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600 and stat.S_IMODE(config.stat().st_mode) == 0o700
    assert token[1] in saved.read_text()

    # A fresh terminal: no --url, no --token, a data dir without any token: the profile is found.
    assert _cli("whoami", env=env).startswith("carol (member), quota")
    listed = _cli("tokens", "list", "carol", env=env)
    assert "default" in listed and token[1] not in listed  # never the token itself


def test_workers_add_list_revoke_and_a_priority_ceiling_from_the_cli(service, tmp_path: Path) -> None:
    """Issue 34 part 4: an admin gives a worker host its own credential (printed once), lists and revokes it,
    and sets a member's priority ceiling."""
    settings, admin = service()
    base = str(admin.http.base_url).removesuffix("/api/").removesuffix("/api")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RANKZERO_")}
    env |= {"RANKZERO_CONFIG_DIR": str(tmp_path / "c"), "RANKZERO_DATA_DIR": str(tmp_path / "d"), "COLUMNS": "200"}
    auth = ("--url", base, "--token", settings.token())

    added = _cli("workers", "add", "gpu-7", *auth, env=env)
    token = re.search(r"^([A-Za-z0-9_-]{43})$", added, re.MULTILINE)
    assert token is not None and "RANKZERO_WORKER_TOKEN" in added, added
    worker = Client(base, token[1])
    assert worker.http.get("/workers/me").json() == {"host": "gpu-7"}
    assert worker.http.get("/users").status_code == 403
    listed = _cli("workers", "list", *auth, env=env)
    assert "gpu-7" in listed and token[1] not in listed
    assert "revoked" in _cli("workers", "revoke", "gpu-7", *auth, env=env)
    assert worker.http.get("/workers/me").status_code == 401

    _cli("users", "add", "dora", *auth, env=env)
    assert "priority ceiling 3" in _cli("users", "set", "dora", "--max-priority", "3", *auth, env=env)
    assert "priority ceiling default" in _cli("users", "set", "dora", "--max-priority", "default", *auth, env=env)
