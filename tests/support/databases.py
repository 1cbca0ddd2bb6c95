"""Database fixtures: a fresh SQLite file, a fresh PostgreSQL database, or both in turn.

- `sqlite_url`, `pg_url`: a new, empty database each (PostgreSQL: `rankzero_t_<random>` on
  127.0.0.1:5432 as user postgres, dropped afterwards; skipped when the server is not there).
- `database_url`: parametrized over both, so a test using it runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

PG_ADMIN_DSN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres connect_timeout=3"
PG_URL_TEMPLATE = "postgresql://postgres@127.0.0.1:5432/{name}"


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
