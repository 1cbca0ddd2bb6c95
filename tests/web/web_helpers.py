"""Helpers the browser tests import (conftest modules are not importable by name here)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "test-output" / "screenshots"
ALLOWED_HTTP_ERRORS: dict[int, list[tuple[int, str]]] = {}  # id(page) -> [(status, url part)]


def allow_http_error(page, status: int, url_part: str) -> None:
    """This page is expected to get `status` from a URL containing url_part (not a console error then)."""
    ALLOWED_HTTP_ERRORS.setdefault(id(page), []).append((status, url_part))


def shot(page, name: str, *, full_page: bool = True) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path
