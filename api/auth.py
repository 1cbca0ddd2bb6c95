"""Who may call the API, and as whom: a bearer token (CLI, curl) or the dashboard's session cookie (issue 23).

A bearer token is the server's own token (RANKZERO_API_TOKEN / <data dir>/api_token: the first admin,
also what workers use) or a user's token (core/users.py: stored as SHA-256, revocable). Either way
the request runs as a `Principal` (user, role), which routes read through `CurrentUser` and guard
with `require_role` (api/deps.py). A viewer's unsafe request (POST, PATCH, DELETE…) is refused here,
once for every route: 403 naming the role it needs.

The session cookie is HttpOnly and SameSite=Strict and carries, signed, the id of one row of
`web_sessions`. It is signed with a key derived from the server token (HMAC-SHA256(token, label)),
never with the token itself: rotating the token signs everyone out, and a leaked cookie tells
nothing about the token. Signing out deletes that session's row only (other browsers stay signed
in); revoking a token deletes every session opened with it. A session lives
`RANKZERO_SESSION_MAX_AGE_S` (default 12 h; checked server-side from the row). The row holds a CSRF
secret; cookie-authenticated unsafe requests must echo it in the X-CSRF-Token header (the JS reads it
from the non-HttpOnly `rankzero_csrf` cookie). Tokens are compared in constant time (the server
token) or by their SHA-256 in an indexed lookup (users' tokens).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Mapping
from time import monotonic
from typing import Annotated, Literal

from fastapi import Depends, HTTPException, Request, Response, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from itsdangerous import BadSignature, URLSafeTimedSerializer
from sqlmodel import Session
from starlette.requests import cookie_parser

from core import permissions, users
from core.db import get_engine
from core.settings import Settings
from core.users import Principal, Role

SESSION_COOKIE = "rankzero_session"
CSRF_COOKIE = "rankzero_csrf"
CSRF_HEADER = "X-CSRF-Token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_SESSION_KEY_LABEL = b"rankzero/session-cookie/v2"
# Users' tokens seen valid lately, for the cheap pre-checks that run before a body is read (api/limits.py,
# api/client_limits.py); the authoritative check (`require_auth`) always reads the table, so a revoked
# token is refused at once and only its pre-check lags by this much.
_KNOWN_TTL_S = 30.0
_KNOWN_MAX = 4096
_known_tokens: dict[str, float] = {}
_token_users: dict[str, int] = {}  # sha256 of a user's token seen valid → her id (the per-user stream cap)

AuthMethod = Literal["bearer", "session"]


def app_settings(request: Request) -> Settings:
    """The Settings the app was created with (create_app puts them on app.state)."""
    return request.app.state.settings


def token_matches(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())


def session_key(token: str) -> bytes:
    """The cookie-signing key: HMAC-SHA256(token, label); the token itself signs nothing."""
    return hmac.new(token.encode(), _SESSION_KEY_LABEL, hashlib.sha256).digest()


def _serializer(settings: Settings) -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(secret_key=session_key(settings.token()), salt="rankzero-session")


def _db(settings: Settings) -> Session:
    return Session(get_engine(settings.resolved_database_url))


# --- bearer tokens ----------------------------------------------------------------------------------------


def bearer_principal(given: str, settings: Settings) -> Principal | None:
    """Who a bearer token is: the first admin for the server token, a user for one of theirs, else None."""
    given = given.strip()
    if not given or len(given) > 512:
        return None
    with _db(settings) as db:
        if token_matches(given, settings.token()):
            return users.first_admin(db)
        who = users.authenticate(db, given)
    if who is not None:
        _remember(given, who.user_id)
    return who


def _remember(token: str, user_id: int | None = None) -> None:
    if len(_known_tokens) >= _KNOWN_MAX:
        _known_tokens.clear()
        _token_users.clear()
    _known_tokens[users.token_sha256(token)] = monotonic() + _KNOWN_TTL_S
    if user_id is not None:
        _token_users[users.token_sha256(token)] = user_id


def bearer_known(given: str, settings: Settings) -> bool:
    """Cheap: the server token, or a user's token seen valid in the last seconds, or (first sight) its row."""
    given = given.strip()
    if token_matches(given, settings.token()):
        return True
    until = _known_tokens.get(users.token_sha256(given))
    if until is not None and until > monotonic():
        return True
    return bearer_principal(given, settings) is not None


def forget_tokens() -> None:
    """After a revocation: the pre-checks read the table again."""
    _known_tokens.clear()
    _token_users.clear()


def bearer_user_id(given: str, settings: Settings) -> int | None:
    """Cheap, for the per-user caps run before a route (api/client_limits.py): whose token this is (the first
    admin's for the server token, a cache hit for a user's token seen valid lately, else its row), or None."""
    given = given.strip()
    if token_matches(given, settings.token()):
        return users.FIRST_ADMIN_ID
    sha = users.token_sha256(given)
    until = _known_tokens.get(sha)
    if until is not None and until > monotonic() and sha in _token_users:
        return _token_users[sha]
    who = bearer_principal(given, settings)
    return who.user_id if who is not None else None


# --- dashboard sessions -----------------------------------------------------------------------------------


def issue_session(response: Response, settings: Settings, who: Principal, *, secure: bool = False) -> None:
    """Sign the browser in as `who`: a new session row, its cookie and the CSRF companion."""
    with _db(settings) as db:
        sid, csrf = users.open_session(db, who, settings.session_max_age_s)
    max_age = settings.session_max_age_s
    response.set_cookie(
        SESSION_COOKIE,
        _serializer(settings).dumps({"sid": sid}),
        max_age=max_age,
        httponly=True,
        samesite="strict",
        secure=secure,
        path="/",
    )
    response.set_cookie(CSRF_COOKIE, csrf, max_age=max_age, httponly=False, samesite="strict", secure=secure, path="/")


def _session_id(raw: str | None, settings: Settings) -> str | None:
    if not raw or len(raw) > 1024:
        return None
    try:
        data = _serializer(settings).loads(raw, max_age=settings.session_max_age_s)
    except BadSignature:
        return None
    sid = data.get("sid") if isinstance(data, dict) else None
    return sid if isinstance(sid, str) and len(sid) <= 64 else None


def _session(raw: str | None, settings: Settings) -> tuple[Principal, str] | None:
    """The user and CSRF secret of a valid, unexpired, not signed-out session cookie, else None."""
    sid = _session_id(raw, settings)
    if sid is None:
        return None
    with _db(settings) as db:
        return users.session_user(db, sid, settings.session_max_age_s)


def session_of(request: Request, settings: Settings) -> tuple[Principal, str] | None:
    """The user and CSRF secret of the request's session cookie, None when there is no valid session."""
    return _session(request.cookies.get(SESSION_COOKIE), settings)


def session_csrf(request: Request, settings: Settings) -> str | None:
    """The CSRF secret of a valid session cookie, or None when there is no valid session."""
    found = session_of(request, settings)
    if found is None:
        return None
    request.state.principal = found[0]  # the pages' templates show admins their links (base.html)
    return found[1]


def end_session(request: Request, response: Response, settings: Settings) -> None:
    """Sign out this browser: its session row goes (a copied cookie stops working); other sessions stay."""
    sid = _session_id(request.cookies.get(SESSION_COOKIE), settings)
    if sid is not None:
        with _db(settings) as db:
            users.close_session(db, sid)
    clear_session(response)


def clear_session(response: Response) -> None:
    response.delete_cookie(SESSION_COOKIE, path="/")
    response.delete_cookie(CSRF_COOKIE, path="/")


def has_credentials(headers: Mapping[bytes, bytes], settings: Settings) -> bool:
    """Whether raw ASGI headers carry a known bearer token or a valid session cookie.

    Cheap (an HMAC, a cache hit or one indexed row) and run before any body is read, so a request
    without credentials never gets to make the server buffer or scan a large body.
    """
    scheme, _, given = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
    if scheme.lower() == "bearer" and given.strip():
        return bearer_known(given, settings)
    cookie = headers.get(b"cookie")
    if not cookie or len(cookie) > 8192:
        return False
    return _session(cookie_parser(cookie.decode("latin-1")).get(SESSION_COOKIE), settings) is not None


# Declares the bearer scheme in the OpenAPI (the /docs "Authorize" button); the check is below.
_bearer_scheme = HTTPBearer(auto_error=False, description="Your API token (`rankzero users add` or `rankzero up`).")


def forbidden(needed: Role, who: Principal, what: str) -> HTTPException:
    """The 403 of every refusal: which role it needs, and who asked."""
    return HTTPException(
        status.HTTP_403_FORBIDDEN, f"{what} needs role {needed}; {who.name} is {who.role}: ask an admin"
    )


def require_auth(
    request: Request,
    settings: Annotated[Settings, Depends(app_settings)],
    _declared: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer_scheme)] = None,
) -> Principal:
    """Dependency for every /api route but /health: who calls. Viewers are refused any unsafe method."""
    header = request.headers.get("authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() == "bearer" and given:
        who = bearer_principal(given, settings)
        if who is None:
            raise HTTPException(
                status.HTTP_401_UNAUTHORIZED, "invalid or revoked API token", headers={"WWW-Authenticate": "Bearer"}
            )
    else:
        found = session_of(request, settings)
        if found is None:
            raise HTTPException(
                status.HTTP_401_UNAUTHORIZED,
                "missing credentials: send 'Authorization: Bearer <token>' (see `rankzero up` output) or sign in",
                headers={"WWW-Authenticate": "Bearer"},
            )
        who, csrf = found
        if request.method not in SAFE_METHODS and not token_matches(request.headers.get(CSRF_HEADER, ""), csrf):
            raise HTTPException(
                status.HTTP_403_FORBIDDEN, f"missing or wrong {CSRF_HEADER} header for a cookie session"
            )
    if who.role == users.WORKER_ROLE:
        _worker_route_only(request, who)
    elif request.method not in SAFE_METHODS and not who.at_least("member"):
        raise forbidden("member", who, f"{request.method} {request.url.path}")
    request.state.principal = who
    return who


def _worker_route_only(request: Request, who: Principal) -> None:
    """A worker credential calls the worker's routes only (core/permissions.py), reads included: it lists no
    users or jobs, submits nothing and reads no audit log, so a compromised host learns and changes little."""
    route = request.scope.get("route")
    path = getattr(route, "path", request.url.path).replace("{path:path}", "{path}")
    if not path.startswith("/api/"):  # the route as declared, before app.py's include under /api
        path = "/api" + path
    key = (request.method if request.method != "HEAD" else "GET", path)
    action = permissions.ROUTES.get(key) or permissions.WORKER_READS.get(key)
    if action is None or not permissions.allowed(who.role, action, own=False):
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            f"{request.method} {request.url.path} is not a worker's route: {who.name} is a worker credential, "
            "which only claims, ships and fetches a worker's files; use a user's token",
        )


def require_role(role: Role) -> Callable[..., Principal]:
    """A dependency admitting callers of `role` or stronger; 403 naming the role for the rest."""

    def check(request: Request, who: Annotated[Principal, Depends(require_auth)]) -> Principal:
        if not who.at_least(role):
            raise forbidden(role, who, f"{request.method} {request.url.path}")
        return who

    return check


def permit(who: Principal, action: str, owner_id: int | None = None, target: str | None = None) -> None:
    """403 unless `who` may do `action` (core/permissions.py's table) to `target`, owned by `owner_id`."""
    own = owner_id is not None and owner_id == who.user_id
    why = permissions.refusal(who.role, who.name, action, own, target)
    if why is not None:
        raise HTTPException(status.HTTP_403_FORBIDDEN, why)


def may_change_job(who: Principal, owner_id: int | None, job_id: int, action: str) -> None:
    """`permit` for an action on job `job_id` (job.cancel, job.priority, job.resume…)."""
    permit(who, action, owner_id, f"job {job_id}")


def require_action(action: str) -> Callable[..., Principal]:
    """A dependency admitting callers who may do `action` (one without an owner: core/permissions.py)."""

    def check(who: Annotated[Principal, Depends(require_auth)]) -> Principal:
        permit(who, action)
        return who

    return check


AuthDep = Annotated[Principal, Depends(require_auth)]
