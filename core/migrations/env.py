"""Alembic environment: the target is SQLModel.metadata as core.tables defines it.

`core.migrate` runs this with a live connection in `config.attributes["connection"]`, so it works
from the installed package whatever the current directory. The `alembic` command line (with
core/alembic.ini) works too: it reads the URL from RANKZERO_DATABASE_URL / Settings.
"""

from __future__ import annotations

from alembic import context
from sqlmodel import SQLModel

import core.tables  # noqa: F401  (registers the tables on SQLModel.metadata)

target_metadata = SQLModel.metadata


def _configure(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        # SQLite cannot ALTER most things in place; batch mode copies the table instead.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        compare_server_default=False,
    )


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    from core.db import get_engine
    from core.settings import get_settings

    url = context.config.get_main_option("sqlalchemy.url") or get_settings().resolved_database_url
    with get_engine(url).connect() as conn:
        _configure(conn)
        with context.begin_transaction():
            context.run_migrations()
        conn.commit()


if context.is_offline_mode():
    raise SystemExit("offline (--sql) migrations are not supported; run against a database")
run_migrations_online()
