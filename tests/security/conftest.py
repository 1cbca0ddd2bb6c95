"""Fixtures for the security tests: a real uvicorn server (the shared `live_api` fixture) with a
strong token of its own, and a signed-in dashboard session (helpers in tests/support/attack.py).

Every test here attacks the server the way a client on the network would: over a real socket on
127.0.0.1, never through an in-process client.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.support.attack import TOKEN, Server, sign_in


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
