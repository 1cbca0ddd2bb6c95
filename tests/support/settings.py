"""Settings for a service under test, and the environment that hands them to a child process.

- `API_TOKEN`: the token of every API the tests start (the server refuses short ones).
- `api_settings(database_url=..., **overrides)`: Settings under tmp_path with token API_TOKEN.
- `auth_headers`: the Authorization header for API_TOKEN.
- `settings_env(settings, **extra)`: the environment that gives a subprocess exactly `settings`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

API_TOKEN = "rankzero-test-token-0123456789abcdef0123456789"


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
