"""Fixtures for the limits tests: an in-process API on settings of the test's choosing."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

TOKEN = "limits-test-token-" + "x" * 32  # long enough for any token-strength rule


@pytest.fixture
def limits_settings(api_settings: Callable[..., Any]) -> Callable[..., Any]:
    """Factory: `api_settings` with a strong token and the overrides given."""

    def make(**overrides: Any) -> Any:
        return api_settings(api_token=TOKEN, **overrides)

    return make


@pytest.fixture
def limits_client(limits_settings: Callable[..., Any]) -> Iterator[Callable[..., TestClient]]:
    """Factory: a TestClient on create_app(settings), settings built from the overrides given."""
    from api.app import create_app

    opened: list[TestClient] = []

    def make(**overrides: Any) -> TestClient:
        settings = limits_settings(**overrides)
        client = TestClient(create_app(settings), headers={"Authorization": f"Bearer {TOKEN}"})
        client.__enter__()
        client.settings = settings  # type: ignore[attr-defined]
        opened.append(client)
        return client

    yield make
    for client in opened:
        client.__exit__(None, None, None)
