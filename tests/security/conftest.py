"""Fixtures for the security tests: a real uvicorn server (the shared `live_api` fixture) with a
strong token of its own, and a signed-in dashboard session (helpers in tests/support/attack.py);
`served_api`: the API as `rankzero api` serves it (api.server.serve), in a process of its own.

Every test here attacks the server the way a client on the network would: over a real socket on
127.0.0.1, never through an in-process client.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.attack import TOKEN, Server, sign_in
from tests.support.commands import ROOT
from tests.support.ports import free_port
from tests.support.procs import stop_group
from tests.support.services import wait_api_healthy
from tests.support.settings import settings_env


@pytest.fixture
def start_server(api_settings: Callable[..., Any], live_api: Callable[..., str]) -> Callable[..., Server]:
    """`start_server(**settings_overrides)` → a live server with TOKEN (overridable) on 127.0.0.1."""

    def start(**overrides: Any) -> Server:
        settings = api_settings(**{"api_token": TOKEN, **overrides})
        return Server(live_api(settings), settings)

    return start


@pytest.fixture
def server(start_server: Callable[..., Server]) -> Server:
    return start_server()


@pytest.fixture
def session_client(server: Server):
    client = sign_in(server)
    yield client
    client.close()


SERVE = "from api.server import serve; from core.settings import Settings; serve(Settings())"


class ServedApi(Server):
    proc: subprocess.Popen[bytes]


@pytest.fixture
def served_api(api_settings: Callable[..., Any], tmp_path: Path) -> Iterator[Callable[..., ServedApi]]:
    """`served_api(**settings_overrides)` → the API under api.server.serve in a subprocess, on a free port."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(**overrides: Any) -> ServedApi:
        settings = api_settings(**{"api_token": TOKEN, "port": free_port(), **overrides})
        log_path = tmp_path / f"api-{settings.port}.log"
        log = open(log_path, "wb")  # noqa: SIM115 - open for the server's lifetime
        proc = subprocess.Popen([sys.executable, "-c", SERVE], env=settings_env(settings), cwd=ROOT,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        procs.append(proc)
        base = f"http://127.0.0.1:{settings.port}"
        wait_api_healthy(base, [proc], log_path, 60)
        served = ServedApi(base, settings)
        served.proc = proc
        return served

    yield start
    for proc in procs:
        stop_group(proc)
