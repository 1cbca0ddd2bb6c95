"""Settings for a service under test, and the environment that hands them to a child process.

- `API_TOKEN`: the token of every API the tests start (the server refuses short ones).
- `api_settings(database_url=..., **overrides)`: Settings under tmp_path with token API_TOKEN.
- `auth_headers`: the Authorization header for API_TOKEN.
- `settings_env(settings, **extra)`: the environment that gives a subprocess exactly `settings`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

API_TOKEN = "rankzero-test-token-0123456789abcdef0123456789"


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file at the newest schema, made once per test process: a fresh migration costs ~0.15 s, and the
    unit tier made 200 of them (issue 40). Tests of the migrations themselves use `sqlite_url`, still empty."""
    from core.db import get_engine
    from core.migrate import upgrade

    path = tmp_path_factory.mktemp("schema") / "template.db"
    upgrade(f"sqlite:///{path}")
    get_engine(f"sqlite:///{path}").dispose()
    return path


def _copy_database(template: Path, target: Path) -> None:
    """`template` into a new file `target` through SQLite's backup API (its WAL included), owner-only."""
    with closing(sqlite3.connect(template)) as source, closing(sqlite3.connect(target)) as copy:
        source.backup(copy)
    target.chmod(0o600)


@pytest.fixture
def api_settings(tmp_path: Path, sqlite_url: str, migrated_sqlite: Path) -> Callable[..., Any]:
    """Factory: Settings rooted in tmp_path (runs dir created), token API_TOKEN, SQLite unless told; the default
    SQLite file starts at the newest schema (a copy of `migrated_sqlite`: the API's own upgrade finds nothing to
    do, as on every start but the first)."""
    from core.settings import Settings

    def make(database_url: str | None = None, **overrides: Any) -> Settings:
        file = Path(sqlite_url.removeprefix("sqlite:///"))
        if database_url in (None, sqlite_url) and not file.exists():
            _copy_database(migrated_sqlite, file)
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


def settings_env(settings: Any, **extra: str) -> dict[str, str]:
    """The environment that gives a subprocess exactly `settings` (never the host's GPUs), plus `extra`."""
    from cli.serve import settings_env as settings_env_of_cli

    env = settings_env_of_cli(settings)
    env.update({
        "RANKZERO_GPUS": settings.gpus if settings.gpus is not None else "",
        "RANKZERO_POLL_S": "0.1",
        "OMP_NUM_THREADS": "1",
    })  # fmt: skip
    env.update(extra)
    return env
