"""`rankzero --help` and every command start fast (issue 29: ≤ 0.3 s): importing the CLI must not
import the heavy libraries a command only needs once it runs (the HTTP client, the ORM, torch, the
settings' validation). Asserted as a mechanism (which modules got imported), never as a time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("httpx", "torch", "sqlalchemy", "sqlmodel", "celery", "kombu", "fastapi", "numpy", "pydantic_settings")


def _imported_by(code: str) -> set[str]:
    probe = f"import sys\n{code}\nimport json\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return {name.split(".")[0] for name in json.loads(out.stdout.splitlines()[-1])}


def test_importing_the_cli_imports_no_heavy_library() -> None:
    loaded = _imported_by("import cli.main")
    assert sorted(loaded & set(HEAVY)) == []
