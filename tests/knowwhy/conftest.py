"""Fixtures for the know-why tests: an app on each database, a client, its session."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from api.app import create_app
from core.db import get_engine
from core.migrate import upgrade
from core.settings import Settings


@pytest.fixture
def settings(api_settings: Callable[..., Settings], database_url: str) -> Settings:
    return api_settings(database_url=database_url)


@pytest.fixture
def client(settings: Settings, auth_headers: dict[str, str]) -> Iterator[TestClient]:
    with TestClient(create_app(settings), headers=auth_headers) as c:
        yield c


@pytest.fixture
def db(settings: Settings, client: TestClient) -> Iterator[Session]:
    upgrade(settings.resolved_database_url)
    with Session(get_engine(settings.resolved_database_url)) as s:
        yield s
