"""Fixtures for the code bundle tests: settings on SQLite, an in-process client, archives made by hand."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from core.settings import Settings


@pytest.fixture
def settings(api_settings: Callable[..., Settings]) -> Settings:
    return api_settings()


@pytest.fixture
def client(settings: Settings, auth_headers: dict[str, str]) -> Iterator[TestClient]:
    with TestClient(create_app(settings), headers=auth_headers) as c:
        yield c


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A small code folder: a package, a top-level module, a .git folder and ignore files."""
    root = tmp_path / "project"
    (root / "mypkg").mkdir(parents=True)
    (root / "mypkg" / "__init__.py").write_text("")
    (root / "mypkg" / "models.py").write_text("def build(**kw):\n    raise RuntimeError('not run here')\n")
    (root / "helpers.py").write_text("X = 1\n")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / ".gitignore").write_text("*.log\ndata/\n!keep.log\n")
    (root / ".rankzeroignore").write_text("checkpoints/\n")
    (root / "data").mkdir()
    (root / "data" / "big.bin").write_bytes(b"\0" * 1000)
    (root / "checkpoints").mkdir()
    (root / "checkpoints" / "last.pt").write_bytes(b"x")
    (root / "run.log").write_text("noise\n")
    (root / "keep.log").write_text("kept\n")
    return root
