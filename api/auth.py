"""Who may call the API: a bearer token (CLI, curl) or the dashboard's session cookie.

The session cookie is HttpOnly and SameSite=Strict. It is signed with a key derived from the API
token and a server-side sign-out counter (HMAC-SHA256(token, label/generation)), never with the
token itself: rotating the token signs everyone out, and a leaked cookie tells nothing about the
token. Signing out increments the counter (`<data dir>/session_generation`, 0600), so every cookie
issued before stops working, copies included. A session lives `RANKZERO_SESSION_MAX_AGE_S`
(default 12 h; the signed timestamp is checked server-side). The cookie carries a CSRF secret;
cookie-authenticated unsafe requests must echo it in the X-CSRF-Token header (the JS reads it from
the non-HttpOnly `rankzero_csrf` cookie).
Tokens are compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

from fastapi import Depends, HTTPException, Request, Response, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.requests import cookie_parser

from core.settings import Settings, write_private

SESSION_COOKIE = "rankzero_session"
CSRF_COOKIE = "rankzero_csrf"
CSRF_HEADER = "X-CSRF-Token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_SESSION_KEY_LABEL = b"rankzero/session-cookie/v1"

AuthMethod = Literal["bearer", "session"]


def app_settings(request: Request) -> Settings:
    """The Settings the app was created with (create_app puts them on app.state)."""
    return request.app.state.settings


def token_matches(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())


def session_key(token: str, generation: int = 0) -> bytes:
    """The cookie-signing key: HMAC-SHA256(token, label + generation); the token itself signs nothing."""
    return hmac.new(token.encode(), b"%s/%d" % (_SESSION_KEY_LABEL, generation), hashlib.sha256).digest()


def _generation_file(settings: Settings) -> Path:
    return settings.data_dir / "session_generation"


def session_generation(settings: Settings) -> int:
    """The sign-out counter (0 before the first sign-out); every sign-out increments it."""
    try:
        return int(_generation_file(settings).read_text().strip() or 0)
    except (OSError, ValueError):
        return 0


def _bump_generation(settings: Settings) -> None:
    """Revoke every session cookie issued so far: the key they were signed with is gone."""
    settings.ensure_data_dir()
    path = _generation_file(settings)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    write_private(tmp, str(session_generation(settings) + 1))
    os.replace(tmp, path)


def _serializer(settings: Settings) -> URLSafeTimedSerializer:
    key = session_key(settings.token(), session_generation(settings))
    return URLSafeTimedSerializer(secret_key=key, salt="rankzero-session")


def issue_session(response: Response, settings: Settings, *, secure: bool = False) -> None:
    """Sign the browser in: set the session cookie and its CSRF companion."""
    csrf = secrets.token_urlsafe(32)
    max_age = settings.session_max_age_s
    response.set_cookie(
        SESSION_COOKIE,
        _serializer(settings).dumps({"csrf": csrf}),
        max_age=max_age,
        httponly=True,
        samesite="strict",
        secure=secure,
        path="/",
    )
    response.set_cookie(CSRF_COOKIE, csrf, max_age=max_age, httponly=False, samesite="strict", secure=secure, path="/")


def _session_csrf(raw: str | None, settings: Settings) -> str | None:
    """The CSRF secret of a valid, unexpired, not signed-out session cookie, else None."""
    if not raw or len(raw) > 1024:
        return None
    try:
        data = _serializer(settings).loads(raw, max_age=settings.session_max_age_s)
    except BadSignature:
        return None
    csrf = data.get("csrf") if isinstance(data, dict) else None
    return csrf if isinstance(csrf, str) else None


def session_csrf(request: Request, settings: Settings) -> str | None:
    """The CSRF secret of a valid session cookie, or None when there is no valid session."""
    return _session_csrf(request.cookies.get(SESSION_COOKIE), settings)


def end_session(request: Request, response: Response, settings: Settings) -> None:
    """Sign out: revoke the session server-side (a copied cookie stops working) and clear the cookies.

    Revocation bumps the sign-out generation, which signs out every browser: one token, one user.
    """
    if session_csrf(request, settings) is not None:
        _bump_generation(settings)
    clear_session(response)


def clear_session(response: Response) -> None:
    response.delete_cookie(SESSION_COOKIE, path="/")
    response.delete_cookie(CSRF_COOKIE, path="/")


def has_credentials(headers: Mapping[bytes, bytes], settings: Settings) -> bool:
    """Whether raw ASGI headers carry the right bearer token or a valid session cookie.

    Cheap (one HMAC, one stat) and run before any body is read, so a request without credentials
    never gets to make the server buffer or scan a large body.
    """
    scheme, _, given = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
    if scheme.lower() == "bearer" and given.strip():
        return token_matches(given.strip(), settings.token())
    cookie = headers.get(b"cookie")
    if not cookie or len(cookie) > 8192:
        return False
    return _session_csrf(cookie_parser(cookie.decode("latin-1")).get(SESSION_COOKIE), settings) is not None


# Declares the bearer scheme in the OpenAPI (the /docs "Authorize" button); the check is below.
_bearer_scheme = HTTPBearer(auto_error=False, description="The API token (`rankzero up` prints it).")


def require_auth(
    request: Request,
    settings: Annotated[Settings, Depends(app_settings)],
    _declared: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer_scheme)] = None,
) -> AuthMethod:
    """Dependency for every /api route but /health."""
    header = request.headers.get("authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() == "bearer" and given:
        if token_matches(given.strip(), settings.token()):
            return "bearer"
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "invalid API token", headers={"WWW-Authenticate": "Bearer"})
    csrf = session_csrf(request, settings)
    if csrf is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "missing credentials: send 'Authorization: Bearer <token>' (see `rankzero up` output) or sign in",
            headers={"WWW-Authenticate": "Bearer"},
        )
    if request.method not in SAFE_METHODS and not token_matches(request.headers.get(CSRF_HEADER, ""), csrf):
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"missing or wrong {CSRF_HEADER} header for a cookie session")
    return "session"


AuthDep = Annotated[AuthMethod, Depends(require_auth)]
