"""The migrations build exactly the schema api/tables.py declares (on both databases), are safe to
run concurrently, and a bounded schemathesis fuzz of the OpenAPI finds no 5xx."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlmodel import SQLModel

import core.tables  # noqa: F401  (registers the tables)
from core.db import get_engine
from core.migrate import alembic_config, current_revision, upgrade
from tests.support.commands import SCHEMATHESIS
from tests.support.deadlines import seconds


def test_migrations_match_the_models(database_url: str) -> None:
    upgrade(database_url)
    upgrade(database_url)  # a second start finds nothing to do
    heads = ScriptDirectory.from_config(alembic_config()).get_heads()
    assert current_revision(database_url) == ",".join(sorted(heads))
    with get_engine(database_url).connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), SQLModel.metadata)
    assert diff == [], f"models and migrations disagree; add a revision: {diff}"


def test_concurrent_upgrades_do_not_collide(database_url: str) -> None:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            upgrade(database_url)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []


def test_migrations_apply_from_another_directory(sqlite_url: str, tmp_path: Path) -> None:
    code = (
        "from core.migrate import upgrade, current_revision; "
        f"upgrade({sqlite_url!r}); print(current_revision({sqlite_url!r}))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip(), out.stderr


@pytest.mark.timeout(int(seconds(480)))  # schemathesis is bounded at 400 s inside
def test_schemathesis_fuzz_finds_no_server_errors(
    live_api, api_settings, database_url: str, tmp_path: Path, auth_headers: dict
) -> None:
    base = live_api(api_settings(database_url=database_url))
    # FastAPI builds the OpenAPI document on its first request and keeps it: built here, with time to spare, so
    # schemathesis's per-request bound (which covers loading the schema) is not spent on it under load.
    assert httpx.get(f"{base}/openapi.json", timeout=seconds(120)).status_code == 200
    cmd = [
        *SCHEMATHESIS,
        "run",
        f"{base}/openapi.json",
        "--checks",
        "not_a_server_error",
        "--max-examples",
        "8",
        "--phases",
        "examples,coverage,fuzzing",
        "--seed",
        "1",
        "--exclude-path-regex",
        "/stream$",
        "--request-timeout",
        str(int(seconds(10))),
        "-H",
        f"Authorization: {auth_headers['Authorization']}",
    ]
    # A bound for a hung run, not a speed: 8 examples an operation took over 150 s at load 15.
    out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=seconds(400))
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
