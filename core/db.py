"""Engine and sessions. SQLite gets WAL and a busy timeout so the worker's writes never lock readers out.

PostgreSQL connections carry session limits so that no transaction outlives its holder (issue 20): a
process frozen (SIGSTOP, swap) or cut off inside a transaction is ended by the server after
`db_idle_in_transaction_timeout_s`, releasing its row locks; a statement waits at most
`db_lock_timeout_s` for a lock (the API answers 503 "retry", the scheduler skips that job this pass)
and runs at most `db_statement_timeout_s`; TCP keepalives find a connection across a cut link dead in
about half a minute instead of the kernel's two hours. docs/reliability.md names the tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from sqlalchemy import event, func, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, InterfaceError, InternalError, OperationalError
from sqlmodel import Session, create_engine

if TYPE_CHECKING:
    from core.settings import Settings

# PostgreSQL's SQLSTATE for "lock not available" (lock_timeout, NOWAIT).
_LOCK_NOT_AVAILABLE = "55P03"
KEEPALIVE_INTERVAL_S = 5
KEEPALIVE_COUNT = 3


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
    connect_args = pg_connect_args() if url.startswith("postgresql") else {}
    return create_engine(
        url, pool_pre_ping=True, pool_size=POOL_SIZE, max_overflow=POOL_OVERFLOW, connect_args=connect_args
    )


def pg_connect_args(settings: Settings | None = None) -> dict[str, Any]:
    """libpq parameters of every PostgreSQL connection: the session limits and TCP keepalives.

    The limits are set at connect (`options`), so they hold for every transaction on the connection,
    whoever opens it; `without_limits` lifts them for one transaction (migrations)."""
    if settings is None:
        from core.settings import get_settings

        settings = get_settings()

    def ms(seconds: float) -> int:
        return max(1, round(seconds * 1000))

    options = (
        f"-c lock_timeout={ms(settings.db_lock_timeout_s)}"
        f" -c idle_in_transaction_session_timeout={ms(settings.db_idle_in_transaction_timeout_s)}"
        f" -c statement_timeout={ms(settings.db_statement_timeout_s)}"
    )
    return {
        "options": options,
        "keepalives": 1,
        "keepalives_idle": settings.db_keepalive_idle_s,
        "keepalives_interval": KEEPALIVE_INTERVAL_S,
        "keepalives_count": KEEPALIVE_COUNT,
    }


def without_limits(conn: Connection) -> None:
    """Lift the lock and statement timeouts for the rest of this transaction (PostgreSQL; else nothing).

    For migrations: a second process waits on the migration lock for as long as the first one migrates,
    and a migration's statement may run long on a big table."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SET LOCAL lock_timeout = 0"))
        conn.execute(text("SET LOCAL statement_timeout = 0"))


def wait_for_locks_at_most(conn: Connection, seconds: float) -> None:
    """This transaction waits at most `seconds` for a row lock (PostgreSQL; else nothing): for a writer
    that has better things to do than wait on a frozen holder (the scheduler skips that job)."""
    if conn.dialect.name == "postgresql":
        conn.execute(text(f"SET LOCAL lock_timeout = {max(1, round(seconds * 1000))}"))


def is_lock_timeout(exc: BaseException) -> bool:
    """True when `exc` is PostgreSQL's "lock not available" (a lock_timeout expired): the row is held by
    another transaction, perhaps a frozen one; trying again later is right."""
    orig = exc.orig if isinstance(exc, DBAPIError) else exc
    return getattr(orig, "sqlstate", None) == _LOCK_NOT_AVAILABLE


def is_outage(exc: BaseException) -> bool:
    """True for a database error that passes (a restart, a cut link, a lock or statement timeout, SQLite busy):
    worth retrying while the work goes on. False for one that would fail the same way again (bad data, a
    broken constraint, a query bug): retrying it as an outage would hang the job for ever (issue 20)."""
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    return isinstance(exc, (OperationalError, InterfaceError, InternalError))


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
