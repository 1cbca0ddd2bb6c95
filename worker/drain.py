"""Graceful worker shutdown (a deploy): the Celery main process raises a flag file, every supervisor
in its pool sees it, stops its ranks with SIGTERM (they checkpoint) and hands the job back to the queue."""

from __future__ import annotations

import os
from pathlib import Path

from core.settings import Settings


def _flag(settings: Settings, pid: int) -> Path:
    return settings.data_dir / "drain" / str(pid)


def request_drain(settings: Settings) -> None:
    path = _flag(settings, os.getpid())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()


def clear_drain(settings: Settings) -> None:
    _flag(settings, os.getpid()).unlink(missing_ok=True)


def draining(settings: Settings) -> bool:
    """True when this process (solo pool) or its parent (prefork pool) is shutting down."""
    return _flag(settings, os.getpid()).exists() or _flag(settings, os.getppid()).exists()
