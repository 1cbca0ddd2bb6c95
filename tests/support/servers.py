"""Throwaway Redis and PostgreSQL servers a test owns and may stop: never the machine's shared ones
on 6379 / 5432, which other tests use.

- `redis_server`: a RedisServer of the test's own (no persistence), started; stopped after.
- `pg_cluster`: a PgCluster of the test's own (initdb in a temp dir), started; stopped and removed after.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.deadlines import deadline_in
from tests.support.ports import free_port, wait_port


class RedisServer:
    """redis-server on its own port, no persistence (a restart loses what the broker held)."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.workdir / "redis.log", "ab") as log:
            self.proc = subprocess.Popen(
                [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                 "--daemonize", "no", "--dir", str(self.workdir)],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        wait_port(self.port, True, 20)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)  # a crash, not a polite shutdown
            self.proc.wait(timeout=10)
        self.proc = None
        wait_port(self.port, False, 10)


def _pg_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        raise RuntimeError(f"PostgreSQL's {name} is not installed under /usr/lib/postgresql/*/bin")
    return found[-1]


class PgCluster:
    """A PostgreSQL cluster of our own (initdb in a temp dir, its own port), run as the `postgres`
    OS user because initdb refuses root. Restartable: `stop()` + `start()`."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.data = workdir / "pgdata"
        self.proc: subprocess.Popen[bytes] | None = None
        self._user = pwd.getpwnam("postgres") if os.geteuid() == 0 else None

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _as_owner(self) -> dict[str, object]:
        return {"user": self._user.pw_uid, "group": self._user.pw_gid, "extra_groups": []} if self._user else {}

    def init(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self._user:
            os.chown(self.workdir, self._user.pw_uid, self._user.pw_gid)
        subprocess.run([_pg_bin("initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync"],
                       check=True, capture_output=True, timeout=120, cwd=self.workdir, **self._as_owner())  # type: ignore[arg-type]  # fmt: skip

    def start(self) -> None:
        with open(self.workdir / "postgres.log", "ab") as log:
            if self._user:
                os.chown(self.workdir / "postgres.log", self._user.pw_uid, self._user.pw_gid)
            self.proc = subprocess.Popen(
                [_pg_bin("postgres"), "-D", str(self.data), "-p", str(self.port), "-k", str(self.workdir),
                 "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=100"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=self.workdir, **self._as_owner(),  # type: ignore[arg-type]
            )  # fmt: skip
        wait_port(self.port, True, 30)
        deadline = deadline_in(30)
        import psycopg

        while True:  # the port opens before the server accepts queries
            try:
                with psycopg.connect(
                    f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres connect_timeout=2"
                ) as c:
                    c.execute("select 1")
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def stop(self) -> None:
        """Fast shutdown (SIGINT): connections are cut, as in a restart by an operator or a failover."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def pg_cluster() -> Iterator[PgCluster]:
    # Not under tmp_path: pytest's base temp dir is private to root and the server runs as `postgres`.
    workdir = Path(tempfile.mkdtemp(prefix="rankzero-pg-"))
    workdir.chmod(0o755)  # mkdtemp makes it private to root; the server's user must reach its cluster inside
    cluster = PgCluster(workdir / "cluster")
    try:
        cluster.init()
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)
