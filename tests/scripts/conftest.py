"""Script jobs (spec `entrypoint`): the user's own torchrun script, uploaded as a code bundle.

- `service_options`: the real launcher (no stand-in trainer: a script job runs the user's script).
- `upload(client, folder) -> "sha256:<hex>"`: packs `folder` as `rankzero submit --code` does
  (core/bundles.py `pack`) and POSTs it to /api/code.
- `project(name)`: a copy of tests/scripts/projects/<name> (the scripts the tests run) in tmp_path.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.services import DEFAULT_SETTINGS, ServiceOptions

PROJECTS = Path(__file__).parent / "projects"


@pytest.fixture
def service_options() -> ServiceOptions:
    return ServiceOptions(settings=DEFAULT_SETTINGS, fake_trainer=False)


@pytest.fixture
def project(tmp_path: Path) -> Callable[[str], Path]:
    def copy(name: str) -> Path:
        target = tmp_path / "projects" / name
        shutil.copytree(PROJECTS / name, target)
        return target

    return copy


def _upload(client: Any, folder: Path) -> str:
    from core import bundles

    packed = bundles.pack(folder, folder.parent / f"{folder.name}.tar.gz")
    body = packed.archive.read_bytes()
    r = client.http.post("/code", content=body, headers={"Content-Type": "application/gzip"})
    assert r.status_code in (200, 201), r.text
    return f"sha256:{r.json()['sha256']}"


@pytest.fixture
def upload() -> Callable[[Any, Path], str]:
    return _upload


def script_spec(name: str, code: str, entrypoint: str, **kw: Any) -> dict[str, Any]:
    return {"name": name, "code": code, "entrypoint": entrypoint, "device": "cpu", **kw}
