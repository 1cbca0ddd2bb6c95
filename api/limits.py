"""Request limits enforced before any route runs: credentials before bodies, body size, body time, JSON depth.

A pure ASGI middleware, so it sees the raw byte stream (chunked bodies as well as bodies with a
Content-Length) and never lets the app parse more than the limit. In order, per request with a body:

1. Content-Length malformed → 400; larger than `max_body_bytes` → 413 (nothing read).
2. Credentials (bearer token or session cookie, `api.auth.has_credentials`: one HMAC, one stat)
   are checked from the headers alone. Without them, only the sign-in/out forms may send a body,
   and only `anon_max_body_bytes` of it, and only `anon_body_concurrency` such requests read their
   bodies at once (503 past that); anything else is answered 401 before a byte of body is read.
3. The body must arrive within `body_timeout_s` (408 otherwise): a trickling client cannot hold a
   connection and its buffer forever.
4. A JSON body (or one without a content type, which FastAPI also parses as JSON; content types are
   compared case-insensitively) nesting deeper than 32 levels → 400. The check is linear time:
   strings are stripped with a regex that never backtracks, then brackets are counted with
   C-speed `bytes` operations, at most 33 passes.

The body is buffered (it is at most `max_body_bytes`) and replayed to the app.
"""

from __future__ import annotations

import asyncio
import json
import re

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.auth import has_credentials
from core.settings import Settings

MAX_JSON_DEPTH = 32
_STRING = re.compile(rb'"[^"]*"')
_CURLY_TO_SQUARE = bytes.maketrans(b"{}", b"[]")
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))
OPEN_BODY_PATHS = frozenset({"/login", "/logout"})
# POST bodies these routes stream themselves, with their own size and time limits (a code bundle is
# up to RANKZERO_MAX_BUNDLE_BYTES): passed through unbuffered, and only to a caller with credentials.
STREAMED_BODY_PATHS = frozenset({"/api/code"})
# Worker uploads to the artifact store (api/routes/artifacts.py): streamed, checked by sha256 and size there.
STREAMED_BODY_PREFIXES = ("/api/artifacts/jobs/",)


def _outside_strings(body: bytes) -> bytes:
    """The body with the contents of every JSON string removed (an unterminated one runs to the end).

    The old regex backtracked (quadratic on an unterminated string of escaped quotes). Here: drop
    escaped backslashes, then escaped quotes, so every quote left delimits a string; cut an
    unterminated last string; then `"[^"]*"` cannot backtrack (a match ends at the next quote).
    Each step is one linear pass at C speed, and no step makes more bytes than it was given.
    """
    unescaped = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    if unescaped.count(b'"') % 2:
        unescaped = unescaped[: unescaped.rfind(b'"')]
    return _STRING.sub(b"", unescaped)


def json_depth(body: bytes, cap: int = 256) -> int:
    """Deepest nesting of arrays/objects in a JSON text (strings skipped), without parsing it.

    Counts at most `cap` levels (deeper answers `cap`), in time linear in len(body) × cap with
    every step at C speed: brackets only are kept; a run of `cap` openers settles it at once;
    otherwise each pass deletes the innermost (empty) pairs, and passes + unclosed openers = depth.
    """
    brackets = _outside_strings(body).translate(_CURLY_TO_SQUARE, _NOT_BRACKETS)
    passes = 0
    while passes < cap:
        if b"[" * (cap - passes) in brackets:
            return cap
        shorter = brackets.replace(b"[]", b"")
        if len(shorter) == len(brackets):
            break
        brackets = shorter
        passes += 1
    return min(cap, passes + brackets.count(b"["))


async def _reply(send: Send, status: int, detail: str, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
        *(extra or []),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class _Refused(Exception):
    """A request answered by the middleware itself: status, detail, extra headers."""

    def __init__(self, status: int, detail: str, headers: list[tuple[bytes, bytes]] | None = None) -> None:
        super().__init__(detail)
        self.status, self.detail, self.headers = status, detail, headers


class _Disconnected(Exception):
    pass


def _declared_length(headers: dict[bytes, bytes]) -> int | None:
    raw = headers.get(b"content-length")
    if raw is None:
        return None
    if not raw.strip().isdigit() or len(raw) > 18:
        raise _Refused(400, "malformed Content-Length header")
    return int(raw)


async def _read_body(receive: Receive, limit: int, too_big: str) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Disconnected
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _Refused(413, too_big)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


class RequestLimitsMiddleware:
    def __init__(self, app: ASGIApp, settings: Settings, max_json_depth: int = MAX_JSON_DEPTH) -> None:
        self.app = app
        self.settings = settings
        self.max_body_bytes = settings.max_body_bytes
        self.anon_max_body_bytes = min(settings.anon_max_body_bytes, settings.max_body_bytes)
        self.max_json_depth = max_json_depth
        self.anon_slots = asyncio.Semaphore(settings.anon_body_concurrency)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        try:
            declared = _declared_length(headers)
            if not declared and b"transfer-encoding" not in headers:
                await self.app(scope, receive, send)  # no body at all (a plain GET): nothing to count
                return
            if self._streamed(scope, headers):
                await self.app(scope, receive, send)  # api/routes/code.py reads, limits and times its own body
                return
            body = await self._body(scope, headers, declared, receive)
            self._check_json(headers, body)
        except _Refused as refused:
            await _reply(send, refused.status, refused.detail, refused.headers)
            return
        except _Disconnected:
            return

        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def _streamed(self, scope: Scope, headers: dict[bytes, bytes]) -> bool:
        """A POST to a STREAMED_BODY_PATHS route from a caller with credentials; without them, 401 unread."""
        path = str(scope.get("path", ""))
        streamed = path in STREAMED_BODY_PATHS or path.startswith(STREAMED_BODY_PREFIXES)
        if scope.get("method") != "POST" or not streamed:
            return False
        if not has_credentials(headers, self.settings):
            raise _Refused(
                401,
                "missing credentials: send 'Authorization: Bearer <token>' (see `rankzero up` output) or sign in",
                [(b"www-authenticate", b"Bearer")],
            )
        return True

    async def _body(self, scope: Scope, headers: dict[bytes, bytes], declared: int | None, receive: Receive) -> bytes:
        """The whole body, read only from a caller allowed to send one, within the size and time limits."""
        if declared is not None and declared > self.max_body_bytes:
            raise _Refused(413, self._too_big(self.max_body_bytes))
        if has_credentials(headers, self.settings):
            return await self._timed_read(receive, self.max_body_bytes)
        if scope.get("path") not in OPEN_BODY_PATHS:
            raise _Refused(
                401,
                "missing credentials: send 'Authorization: Bearer <token>' (see `rankzero up` output) or sign in",
                [(b"www-authenticate", b"Bearer")],
            )
        if declared is not None and declared > self.anon_max_body_bytes:
            raise _Refused(413, self._too_big(self.anon_max_body_bytes))
        if self.anon_slots.locked():
            raise _Refused(503, "too many unauthenticated requests in flight; retry shortly", [(b"retry-after", b"5")])
        async with self.anon_slots:
            return await self._timed_read(receive, self.anon_max_body_bytes)

    async def _timed_read(self, receive: Receive, limit: int) -> bytes:
        try:
            with anyio.fail_after(self.settings.body_timeout_s):  # asyncio.timeout is 3.11+; this is 3.10 too
                return await _read_body(receive, limit, self._too_big(limit))
        except TimeoutError:
            raise _Refused(408, f"request body not received within {self.settings.body_timeout_s:g} s") from None

    def _check_json(self, headers: dict[bytes, bytes], body: bytes) -> None:
        # No content type may still be parsed as JSON by FastAPI; check it too.
        content_type = headers.get(b"content-type", b"").lower()
        if (not content_type.strip() or b"json" in content_type) and json_depth(
            body, cap=self.max_json_depth + 1
        ) > self.max_json_depth:
            raise _Refused(400, f"JSON nests deeper than {self.max_json_depth} levels; flatten it")

    @staticmethod
    def _too_big(limit: int) -> str:
        return f"request body larger than {limit} bytes; send a smaller body"
