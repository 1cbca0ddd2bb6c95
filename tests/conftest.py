"""Shared fixtures: real databases (a fresh SQLite file, a fresh PostgreSQL database), settings
for an API under test, an in-process client and a live uvicorn server.

- `sqlite_url`, `pg_url`: a new, empty database each (PostgreSQL: `rankzero_t_<random>` on
  127.0.0.1:5432 as user postgres, dropped afterwards; skipped when the server is not there).
- `database_url`: parametrized over both, so a test using it runs on SQLite and PostgreSQL.
- `api_settings(database_url=..., **overrides)`: Settings under tmp_path with token API_TOKEN.
- `live_api`: `live_api(settings) -> base URL`, uvicorn in a thread on a free port, stopped after.
"""

from __future__ import annotations

import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

PG_ADMIN_DSN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres connect_timeout=3"
PG_URL_TEMPLATE = "postgresql://postgres@127.0.0.1:5432/{name}"
API_TOKEN = "test-token-0123456789"


def _pg_admin():
    import psycopg

    return psycopg.connect(PG_ADMIN_DSN, autocommit=True)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'rankzero.db'}"


@pytest.fixture
def pg_url() -> Iterator[str]:
    try:
        admin = _pg_admin()
    except Exception as exc:
        pytest.skip(f"PostgreSQL on 127.0.0.1:5432 is not reachable: {exc}")
    name = f"rankzero_t_{secrets.token_hex(6)}"
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = PG_URL_TEMPLATE.format(name=name)
    try:
        yield url
    finally:
        from core.db import get_engine

        get_engine(url).dispose()
        with _pg_admin() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest) -> str:
    return request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")


@pytest.fixture
def api_settings(tmp_path: Path, sqlite_url: str) -> Callable[..., Any]:
    """Factory: Settings rooted in tmp_path (runs dir created), token API_TOKEN, SQLite unless told."""
    from core.settings import Settings

    def make(database_url: str | None = None, **overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "data_dir": tmp_path / "data",
            "runs_dir": tmp_path / "runs",
            "database_url": database_url or sqlite_url,
            "api_token": API_TOKEN,
            "broker_url": f"sqla+sqlite:///{tmp_path / 'broker.db'}",
        }
        values.update(overrides)
        settings = Settings(**values)
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        settings.resolved_runs_dir.mkdir(parents=True, exist_ok=True)
        return settings

    return make


@pytest.fixture
def auth_headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {API_TOKEN}"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def live_api() -> Iterator[Callable[..., str]]:
    """Start the API (create_app(settings)) under uvicorn in a thread; returns its base URL."""
    import httpx
    import uvicorn

    from api.app import create_app

    servers: list[tuple[uvicorn.Server, threading.Thread]] = []

    def start(settings: Any) -> str:
        port = free_port()
        config = uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning", lifespan="on")
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
        thread.start()
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{base}/api/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.05)
        else:
            raise RuntimeError(f"the API did not come up on {base}")
        servers.append((server, thread))
        return base

    yield start
    for server, thread in servers:
        server.should_exit = True
        thread.join(timeout=10)
