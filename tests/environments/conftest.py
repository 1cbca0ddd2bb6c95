"""Fixtures for the environment tests: one cache dir for the session (real builds shared where honest), a
database, a job row, and wheels made by hand for an offline index (two versions of one package)."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session

from core.db import get_engine
from core.migrate import upgrade
from core.settings import Settings
from core.tables import Job, JobStatus

# A tiny pure-Python package the service does not have (checked by test_the_test_packages_are_not_the_services).
PACKAGE = "pyjokes==0.8.3"


@pytest.fixture(scope="session")
def environment_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Shared by the tests that build from PyPI: uv's download cache and built entries are reused across them."""
    return tmp_path_factory.mktemp("environments")


@pytest.fixture
def env_settings(api_settings: Callable[..., Settings], environment_dir: Path) -> Callable[..., Settings]:
    def make(**overrides: Any) -> Settings:
        return api_settings(**{"environment_dir": environment_dir, **overrides})

    return make


@pytest.fixture
def engine(env_settings: Callable[..., Settings]) -> Engine:
    settings = env_settings()
    upgrade(settings.resolved_database_url)
    return get_engine(settings.resolved_database_url)


@pytest.fixture
def new_job(engine: Engine) -> Callable[..., int]:
    """A job row in `starting` (as node 0 holds it while it prepares); returns its id."""

    def make(spec: dict[str, Any] | None = None, status: JobStatus = JobStatus.starting) -> int:
        with Session(engine) as s:
            job = Job(name="env", spec=spec or {}, status=status, attempt=1)
            s.add(job)
            s.commit()
            assert job.id is not None
            return job.id

    return make


def make_wheel(folder: Path, name: str, version: str, extra: dict[str, str] | None = None) -> Path:
    """A pure-Python wheel `name` at `version` whose module says its version (RECORD hashes included), with
    `extra` files (path in the wheel: text) beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    dist = f"{name}-{version}.dist-info"
    files = {
        **(extra or {}),
        f"{name}/__init__.py": f'VERSION = "{version}"\n',
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: rankzero-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    files[f"{dist}/RECORD"] = "\n".join([*record, f"{dist}/RECORD,,"]) + "\n"
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
    return wheel
