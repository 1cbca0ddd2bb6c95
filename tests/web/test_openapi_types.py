"""web/types/api.d.ts (the dashboard's types of the REST shapes) is what the API's OpenAPI gives today.

No server and no browser: web/openapi_types.py builds the app in a scratch folder and runs the pinned
openapi-typescript over its document. A failure means a REST shape changed: `make web-types`, commit.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "web" / "openapi_types.py"


def _generator():
    spec = importlib.util.spec_from_file_location("openapi_types", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_types_match_the_api() -> None:
    gen = _generator()
    if not gen.GENERATOR.exists():
        pytest.fail("web/node_modules has no openapi-typescript: run `make web` (npm ci in web/)")
    assert gen.TYPES_FILE.read_text() == gen.generate(), "web/types/api.d.ts is stale: run `make web-types`"
