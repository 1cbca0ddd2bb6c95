"""Bring a database to the newest schema: `upgrade(database_url)`, run by the API (and worker) on start.

Alembic is configured in code (no alembic.ini, no dependence on the current directory). Two
processes starting at once (API and worker) are serialised: a transaction-scoped advisory lock on
PostgreSQL, a lock file beside the database on SQLite; the second one then finds nothing to do.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import text
from sqlalchemy.engine import Connection, make_url

from core.db import _normalise, get_engine, without_limits

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
_PG_LOCK_KEY = 0x72616E6B  # "rank": any constant shared by every rankzero process


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic Config pointing at core/migrations, optionally bound to a live connection."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


@contextmanager
def _sqlite_file_lock(database_url: str) -> Iterator[None]:
    db = make_url(database_url).database
    if not db or db == ":memory:":
        yield
        return
    lock_path = Path(db + ".migrate.lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def upgrade(database_url: str, revision: str = "heads") -> None:
    """Apply every migration up to `revision` (default: every newest head). Safe to call on every start."""
    url = _normalise(database_url)
    engine = get_engine(url)
    if engine.dialect.name == "sqlite":
        with _sqlite_file_lock(url), engine.begin() as conn:
            command.upgrade(alembic_config(conn), revision)
        return
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            without_limits(conn)  # the second process waits out the first one's migration
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK_KEY})
        command.upgrade(alembic_config(conn), revision)


def current_revision(database_url: str) -> str | None:
    """The revision(s) the database is at, comma-joined (None before the first upgrade)."""
    from alembic.runtime.migration import MigrationContext

    with get_engine(_normalise(database_url)).connect() as conn:
        heads = MigrationContext.configure(conn).get_current_heads()
    return ",".join(sorted(heads)) or None
