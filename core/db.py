"""Engine and sessions. SQLite gets WAL and a busy timeout so the worker's writes never lock readers out."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from functools import lru_cache
from typing import Any

from sqlalchemy import event, func, text
from sqlalchemy.engine import Connection, Engine
from sqlmodel import Session, create_engine


def _normalise(url: str) -> str:
    # psycopg 3 is the driver we ship; accept plain postgresql:// URLs.
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


@lru_cache(maxsize=64)
def get_engine(url: str) -> Engine:
    url = _normalise(url)
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record):
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        return engine
    # pool_size: an API process serves up to ~40 requests at once (anyio's thread pool) and a submit holds
    # two connections; past pool_size each returned overflow connection is closed, and the next one is
    # a new server process on PostgreSQL (bench/api_latency.py, 250 s under a 200-job burst: 25
    # connections opened with 10, 9 with 20). Connections are opened only when needed, so an idle
    # worker still holds one or two.
    return create_engine(url, pool_pre_ping=True, pool_size=POOL_SIZE, max_overflow=POOL_OVERFLOW)


POOL_SIZE = 20
POOL_OVERFLOW = 20


@lru_cache(maxsize=64)
def get_read_engine(url: str) -> Engine:
    """`get_engine(url)` (same pool) in autocommit mode, for routes that only read.

    No BEGIN before the first statement and no ROLLBACK when the connection goes back: two of a read
    route's round trips to the server, each of which waits for the server's backend and then for this
    process's GIL again when the machine is busy. Each statement sees its own snapshot (a read route's
    statements are independent: a page and its total, a job and its timeline).
    """
    return get_engine(url).execution_options(isolation_level="AUTOCOMMIT")


@contextmanager
def session_scope(url: str) -> Iterator[Session]:
    """A session that commits on success and rolls back on error."""
    with Session(get_engine(url)) as session:
        try:
            yield session
            session.commit()
        except Exception:
            session.rollback()
            raise


def db_now(bind: Engine) -> datetime:
    """The database server's clock, as a tz-aware UTC datetime.

    Heartbeats and timelines are stamped and judged with this one clock, so a host whose own clock is
    off never makes a healthy job look dead (or a timeline run backwards). SQLite is one host's file:
    its clock is this host's.
    """
    if bind.dialect.name != "postgresql":
        return datetime.now(timezone.utc)
    with bind.connect() as conn:
        return conn.execute(text("SELECT now()")).scalar_one()


def now_sql(bind: Engine | Connection | Session) -> Any:
    """ "Now" for an INSERT/UPDATE: evaluated by the database server (PostgreSQL), else this host's clock."""
    name = bind.get_bind().dialect.name if isinstance(bind, Session) else bind.dialect.name
    return func.now() if name == "postgresql" else datetime.now(timezone.utc)
