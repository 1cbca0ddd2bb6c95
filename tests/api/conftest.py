"""Fixtures for the API tests: an app on each database, a client, rows inserted directly."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from api.app import create_app
from core.db import get_engine
from core.migrate import upgrade
from core.settings import Settings
from core.tables import Job, JobStatus
from tests.support.jobs import DIGITS_SPEC
from tests.support.rows import insert_job


@pytest.fixture
def settings(api_settings: Callable[..., Settings], database_url: str) -> Settings:
    return api_settings(database_url=database_url)


@pytest.fixture
def client(settings: Settings, auth_headers: dict[str, str]) -> Iterator[TestClient]:
    with TestClient(create_app(settings), headers=auth_headers) as c:
        yield c


@pytest.fixture
def anon_client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as c:
        yield c


@pytest.fixture
def db(settings: Settings) -> Iterator[Session]:
    upgrade(settings.resolved_database_url)  # tests that use rows without a client still need the schema
    with Session(get_engine(settings.resolved_database_url)) as s:
        yield s


@pytest.fixture
def make_job(db: Session) -> Callable[..., Job]:
    """Insert a job row directly (as the worker would find it), in any status."""

    def make(
        name: str = "job", status: JobStatus = JobStatus.queued, spec: dict[str, Any] | None = None, **fields: Any
    ) -> Job:
        return insert_job(db, name, status, spec, **fields)

    return make


@pytest.fixture
def spec() -> dict[str, Any]:
    """A valid JobSpec body (a fresh copy per test)."""
    return {**DIGITS_SPEC}


@pytest.fixture
def make_job_sqlite(api_settings: Callable[..., Settings], sqlite_url: str) -> tuple[Settings, int]:
    """Settings on a migrated SQLite file holding one running job; returns (settings, job id)."""
    settings = api_settings(database_url=sqlite_url)
    upgrade(sqlite_url)
    with Session(get_engine(sqlite_url)) as s:
        job = Job(name="contended", spec={**DIGITS_SPEC, "name": "contended"}, status=JobStatus.running)
        s.add(job)
        s.commit()
        return settings, job.id
