"""Debian's chromium driven by Playwright, for the browser tests (against `web_service`).

- `browser`: headless /usr/bin/chromium (no Playwright browser download); missing it fails.
- `new_page(signed_in=True, viewport=None, **context_options)`: pages that fail the test on any
  console error or uncaught page error; signed in unless told otherwise.
- `page`: a 1280×800 page, already signed in.
- `shot(page, name)`: a full-page screenshot under test-output/screenshots/.
- `allow_http_error(page, status, url_part)`: a non-2xx fetch this page is expected to log.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support import deadlines
from tests.support.commands import ROOT
from tests.support.services import WebService

CHROMIUM = "/usr/bin/chromium"
VIEWPORT = {"width": 1280, "height": 800}
SCREENSHOTS = ROOT / "test-output" / "screenshots"
ALLOWED_HTTP_ERRORS: dict[int, list[tuple[int, str]]] = {}  # id(page) -> [(status, url part)]


def allow_http_error(page, status: int, url_part: str) -> None:
    """This page is expected to get `status` from a URL containing url_part (not a console error then)."""
    ALLOWED_HTTP_ERRORS.setdefault(id(page), []).append((status, url_part))


def shot(page, name: str, *, full_page: bool = True) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is not installed: run `make chromium` (make test does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        yield b
        b.close()


class ConsoleErrors(list):
    """Console errors and uncaught exceptions of a page."""


def watch_console(page) -> ConsoleErrors:
    errors = ConsoleErrors()

    def on_console(msg) -> None:
        if msg.type != "error":
            return
        url = (msg.location or {}).get("url", "")
        # Chrome logs every non-2xx fetch as "Failed to load resource"; a test that provokes one
        # on purpose (a 422 for a bad spec) says so with allow_http_error(page, 422, "/api/jobs").
        if any(
            f"status of {status} " in msg.text and part in url for status, part in ALLOWED_HTTP_ERRORS.get(id(page), [])
        ):
            return
        errors.append(f"console.{msg.type}: {msg.text} @ {url}")

    page.on("console", on_console)
    page.on("pageerror", lambda exc: errors.append(f"pageerror: {exc}"))
    return errors


@pytest.fixture
def new_page(browser, web_service):
    """Factory for pages that fail the test on console errors; signed in unless told otherwise."""
    contexts = []
    watched: list[ConsoleErrors] = []

    def make(signed_in: bool = True, viewport: dict | None = None, **context_options):
        state = None
        if signed_in:
            state = _signed_in_state(browser, web_service)
        context = browser.new_context(
            viewport=viewport or VIEWPORT, storage_state=state, accept_downloads=True, **context_options
        )
        context.set_default_timeout(15_000)
        contexts.append(context)
        page = context.new_page()
        watched.append(watch_console(page))
        return page

    yield make
    for context in contexts:
        context.close()
    errors = [e for errs in watched for e in errs]
    assert not errors, "the browser logged errors:\n" + "\n".join(errors)


_STATE: dict = {}


def _signed_in_state(browser, web_service: WebService) -> dict:
    """A signed-in browser state, reused while it still works (signing out revokes every session)."""
    if "state" not in _STATE or not _still_signed_in(web_service, _STATE["state"]):
        _STATE["state"] = _sign_in(browser, web_service)
    return _STATE["state"]


def _still_signed_in(web_service: WebService, state: dict) -> bool:
    cookies = {c["name"]: c["value"] for c in state["cookies"]}
    with httpx.Client(
        base_url=web_service.base, cookies=cookies, follow_redirects=False, timeout=deadlines.seconds(10)
    ) as client:
        return client.get("/api/jobs").status_code == 200


def _sign_in(browser, web_service: WebService) -> dict:
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    errors = watch_console(page)
    page.goto(f"{web_service.base}/login")
    page.fill("#token", web_service.token)
    page.click("button[type=submit]")
    page.wait_for_url(f"{web_service.base}/")
    state = context.storage_state()
    context.close()
    assert not errors, errors
    return state


@pytest.fixture
def page(new_page):
    return new_page()
