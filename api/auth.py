"""Who may call the API: a bearer token (CLI, curl) or the dashboard's session cookie.

The session cookie is HttpOnly and SameSite=Strict and signed with the API token, so rotating the
token signs everyone out. It carries a CSRF secret; cookie-authenticated unsafe requests must echo
it in the X-CSRF-Token header (the JS reads it from the non-HttpOnly `rankzero_csrf` cookie).
Tokens are compared in constant time.
"""

from __future__ import annotations

import hmac
import secrets
from typing import Annotated, Literal

from fastapi import Depends, HTTPException, Request, Response, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from itsdangerous import BadSignature, URLSafeTimedSerializer

from core.settings import Settings

SESSION_COOKIE = "rankzero_session"
CSRF_COOKIE = "rankzero_csrf"
CSRF_HEADER = "X-CSRF-Token"
SESSION_MAX_AGE_S = 7 * 24 * 3600
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

AuthMethod = Literal["bearer", "session"]


def app_settings(request: Request) -> Settings:
    """The Settings the app was created with (create_app puts them on app.state)."""
    return request.app.state.settings


def token_matches(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())


def _serializer(settings: Settings) -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(secret_key=settings.token(), salt="rankzero-session")


def issue_session(response: Response, settings: Settings, *, secure: bool = False) -> None:
    """Sign the browser in: set the session cookie and its CSRF companion."""
    csrf = secrets.token_urlsafe(32)
    response.set_cookie(
        SESSION_COOKIE,
        _serializer(settings).dumps({"csrf": csrf}),
        max_age=SESSION_MAX_AGE_S,
        httponly=True,
        samesite="strict",
        secure=secure,
        path="/",
    )
    response.set_cookie(
        CSRF_COOKIE, csrf, max_age=SESSION_MAX_AGE_S, httponly=False, samesite="strict", secure=secure, path="/"
    )


def clear_session(response: Response) -> None:
    response.delete_cookie(SESSION_COOKIE, path="/")
    response.delete_cookie(CSRF_COOKIE, path="/")


def session_csrf(request: Request, settings: Settings) -> str | None:
    """The CSRF secret of a valid session cookie, or None when there is no valid session."""
    raw = request.cookies.get(SESSION_COOKIE)
    if not raw:
        return None
    try:
        data = _serializer(settings).loads(raw, max_age=SESSION_MAX_AGE_S)
    except BadSignature:
        return None
    csrf = data.get("csrf") if isinstance(data, dict) else None
    return csrf if isinstance(csrf, str) else None


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
