"""The repository and the executables of the venv running the tests."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
CELERY = str(BIN / "celery")
RANKZERO = str(BIN / "rankzero")
SCHEMATHESIS = [str(BIN / "schemathesis")]
