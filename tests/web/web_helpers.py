"""Helpers the browser tests import (conftest modules are not importable by name here)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "test-output" / "screenshots"


def shot(page, name: str) -> Path:  # noqa: ANN001
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
