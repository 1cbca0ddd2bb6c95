"""Helpers for the API tests that are not fixtures."""

from __future__ import annotations

import sys
from pathlib import Path

# The schemathesis CLI of the venv running the tests.
SCHEMATHESIS = [str(Path(sys.executable).with_name("schemathesis"))]
