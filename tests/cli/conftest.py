"""The CLI tests reuse the worker tests' fixtures (live API + Celery worker subprocesses)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "worker"))

from wk_fixtures import service, workers
