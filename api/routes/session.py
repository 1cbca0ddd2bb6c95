"""Signing in and out of the dashboard: the /login form and POST /logout.

Signing in trades an API token (the user's own, or the server's: the first admin), posted in a
form, never in a URL, for a session of that user: the HttpOnly, SameSite=Strict session cookie of
api.auth, `Secure` when the browser came over https (directly or through a proxy named in
RANKZERO_TRUSTED_PROXIES). Wrong tokens count against the client's allowance in
api/client_limits.py, as wrong bearer tokens do (429 past it). Both form POSTs are guarded against
cross-site requests: login by an Origin/Sec-Fetch-Site check (there is no session yet to hold a
CSRF secret), logout by the session's CSRF secret in a hidden field as well. Signing out ends this
browser's session only.
"""

from __future__ import annotations

from time import monotonic
from typing import Annotated
from urllib.parse import urlsplit

from fastapi import APIRouter, Form, HTTPException, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from api.auth import bearer_principal, end_session, issue_session, session_csrf, session_of, token_matches
from api.client_limits import FailureWindow, client_of, throttled_detail
from api.routes.ui import SettingsDep, page
from core.users import WORKER_ROLE

WORKER_SIGN_IN = "That is a worker host's credential: it ships and fetches a worker's files, and signs no one in."
router = APIRouter(include_in_schema=False)


def _safe_next(next_path: str | None) -> str:
    """Only same-site paths: never an open redirect to another host."""
    if not next_path or not next_path.startswith("/") or next_path.startswith("//") or "\\" in next_path:
        return "/"
    parts = urlsplit(next_path)
    if parts.scheme or parts.netloc or parts.path.startswith("/login"):
        return "/"
    return next_path


def _same_origin(request: Request) -> bool:
    """A form POST from our own pages: Origin (or Referer) names this host, or the browser says same-origin.

    Browsers send Origin on every cross-site POST, so a missing one with no Sec-Fetch-Site is a
    non-browser client (curl), which CSRF cannot be about.
    """
    host = request.headers.get("host", "")
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None and fetch_site not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        referer = request.headers.get("referer")
        if origin == "null" and not referer:
            return False
        origin = referer
    if origin is None:
        return True
    return urlsplit(origin).netloc == host


@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request, settings: SettingsDep, next: str | None = None) -> Response:
    if session_csrf(request, settings) is not None:
        return RedirectResponse(_safe_next(next), status_code=status.HTTP_303_SEE_OTHER)
    return page(request, "login.html", "", next=_safe_next(next), error=None)


@router.post("/login", response_class=HTMLResponse)
def login(
    request: Request,
    settings: SettingsDep,
    token: Annotated[str, Form(max_length=4096)] = "",
    next: Annotated[str, Form(max_length=2048)] = "/",
) -> Response:
    if not _same_origin(request):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "cross-site sign-in refused")
    failures: FailureWindow = request.app.state.auth_failures
    client = client_of(request.scope)
    who = bearer_principal(token, settings) if token else None
    if who is not None and who.role == WORKER_ROLE:  # a worker host's credential opens no dashboard (issue 34)
        return page(request, "login.html", "", next=_safe_next(next), error=WORKER_SIGN_IN, status_code=403)
    if who is None:  # a right token signs in whatever others sent from this address (api/client_limits.py)
        wait = failures.retry_after(client, monotonic())
        if wait is not None:
            return page(request, "login.html", "", next=_safe_next(next), error=throttled_detail(wait), status_code=429)
        failures.record(client, monotonic())
        # 200, not 401: the form is re-rendered with its message, and the browser console stays clean.
        return page(
            request,
            "login.html",
            "",
            next=_safe_next(next),
            error="That token is not this server's API token, nor a live token of one of its users.",
        )
    response = RedirectResponse(_safe_next(next), status_code=status.HTTP_303_SEE_OTHER)
    # https as the client sees it: behind a trusted TLS proxy, its X-Forwarded-Proto (api/app.py)
    issue_session(response, settings, who, secure=request.url.scheme == "https")
    return response


@router.post("/logout")
def logout(request: Request, settings: SettingsDep, csrf: Annotated[str, Form(max_length=256)] = "") -> Response:
    expected = session_csrf(request, settings)
    if expected is not None and (not _same_origin(request) or not token_matches(csrf, expected)):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "sign-out needs the page's CSRF token")
    response = RedirectResponse("/login", status_code=status.HTTP_303_SEE_OTHER)
    end_session(request, response, settings)
    return response


@router.get("/admin", response_class=HTMLResponse)
def admin_page(request: Request, settings: SettingsDep) -> Response:
    """The Team page (users, tokens, audit log): admins only; others are told which role it needs."""
    found = session_of(request, settings)
    if found is None:
        return RedirectResponse(f"/login?next={request.url.path}", status_code=status.HTTP_303_SEE_OTHER)
    who, csrf = found
    request.state.principal = who
    if who.role != "admin":
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"the Team page needs role admin; {who.name} is {who.role}")
    return page(request, "admin.html", csrf, nav="admin")
