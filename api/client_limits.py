"""Per-client limits above HTTP: wrong tokens throttled, live-update streams capped, the Host check.

A client is the address the request came from (`scope["client"]`), rewritten from
X-Forwarded-For only when the connection comes from a proxy named in RANKZERO_TRUSTED_PROXIES
(uvicorn's ProxyHeadersMiddleware, outermost in api/app.py; it also takes X-Forwarded-Proto, so cookies set behind a TLS
proxy are `Secure`).

- `FailureWindow`: at most `auth_failures_per_minute` wrong tokens per client in any 60 s; past
  it, a request presenting an unknown token (bearer header or the sign-in form) gets 429 with
  Retry-After until the oldest failure leaves the window. A right token is never throttled (issue 37:
  ten wrong tokens from one address locked every user behind it, the admin included, out for a
  minute): what the throttle slows is a scanner's load, not guessing, which 256-bit tokens make
  pointless. Pure (time is an argument), with table-driven tests.
- `ClientLimitsMiddleware`: counts wrong bearer tokens into the window and refuses the unknown tokens
  of throttled clients, and holds each user (whatever her address; an address when no credential
  is valid) to `max_streams_per_client` open SSE streams (429 past it): one user's sixteen tabs never
  block another's first behind the same proxy or NAT.
- `HostCheckMiddleware`: Starlette's trusted-Host check; `Host: testserver` (Starlette's
  TestClient) is answered only for requests from the in-process TestClient, whose client is the
  name "testclient" that no socket can have, never for one from the network.
"""

from __future__ import annotations

import json
import math
import re
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from time import monotonic

from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from api.auth import bearer_known, bearer_user_id, session_of
from core.settings import Settings

WINDOW_S = 60.0
MAX_TRACKED_CLIENTS = 10_000
STREAM_PATH = re.compile(r"^/api/jobs/[^/]+/stream/?$")
TEST_CLIENT = "testclient"  # Starlette's TestClient puts this name where a socket's address would be
TEST_CLIENT_HOST = "testserver"  # ... and sends this Host


class FailureWindow:
    """Wrong tokens per client in the last WINDOW_S seconds; pure: every method takes `now`."""

    def __init__(self, per_minute: int, max_clients: int = MAX_TRACKED_CLIENTS) -> None:
        self.per_minute = per_minute
        self.max_clients = max_clients
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def _recent(self, client: str, now: float) -> deque[float]:
        times = self._failures.get(client, deque())
        while times and times[0] <= now - WINDOW_S:
            times.popleft()
        return times

    def retry_after(self, client: str, now: float) -> float | None:
        """Seconds until `client` may present a token again, or None when it may now."""
        times = self._recent(client, now)
        if len(times) < self.per_minute:
            return None
        return times[-self.per_minute] + WINDOW_S - now

    def record(self, client: str, now: float) -> None:
        times = self._recent(client, now)
        times.append(now)
        while len(times) > self.per_minute:  # older ones no longer decide anything
            times.popleft()
        self._failures[client] = times
        self._failures.move_to_end(client)
        while len(self._failures) > self.max_clients:  # the longest-quiet client is forgotten first
            self._failures.popitem(last=False)


def client_of(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else ""


def _bearer(scope: Scope) -> str | None:
    for name, value in scope.get("headers") or []:
        if name == b"authorization":
            scheme, _, given = value.decode("latin-1").partition(" ")
            return given.strip() if scheme.lower() == "bearer" and given.strip() else None
    return None


async def _reply(send: Send, status: int, detail: str, retry_after: float | None = None) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if retry_after is not None:
        headers.append((b"retry-after", str(max(1, math.ceil(retry_after))).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def throttled_detail(retry_after: float) -> str:
    return (
        f"too many wrong tokens from this address; retry in {max(1, math.ceil(retry_after))} s, or now with a right one"
    )


class ClientLimitsMiddleware:
    def __init__(
        self, app: ASGIApp, settings: Settings, failures: FailureWindow, clock: Callable[[], float] = monotonic
    ) -> None:
        self.app = app
        self.settings = settings
        self.failures = failures
        self.clock = clock
        self.max_streams = settings.max_streams_per_client
        self.streams: dict[str, int] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        client = client_of(scope)
        given = _bearer(scope)
        # The server token or a user's (api/auth.py; a cache hit or one indexed row): a right token passes
        # whatever others sent from the same address.
        if given is not None and not bearer_known(given, self.settings):
            wait = self.failures.retry_after(client, self.clock())
            if wait is not None:
                await _reply(send, 429, throttled_detail(wait), wait)
                return
            self.failures.record(client, self.clock())
        if STREAM_PATH.match(scope.get("path", "")):
            # On the loop, like the token check above: a cache hit or one indexed row, never a wait for a thread
            # that open streams might hold.
            who = self._stream_owner(scope, given)
            await self._stream(who or f"address {client}", scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _stream_owner(self, scope: Scope, given: str | None) -> str | None:
        """The user a stream counts against (by her credential: bearer token or session cookie), or None."""
        if given is not None:
            user_id = bearer_user_id(given, self.settings)
        else:
            found = session_of(Request(scope), self.settings)
            user_id = found[0].user_id if found else None
        return f"user {user_id}" if user_id is not None else None

    async def _stream(self, client: str, scope: Scope, receive: Receive, send: Send) -> None:
        if self.streams.get(client, 0) >= self.max_streams:
            detail = f"at most {self.max_streams} live-update streams per user; close one (another tab) first"
            await _reply(send, 429, detail, 5)
            return
        self.streams[client] = self.streams.get(client, 0) + 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.streams[client] -= 1
            if not self.streams[client]:
                del self.streams[client]


class HostCheckMiddleware:
    """The trusted-Host check, with Starlette's TestClient host allowed only to the TestClient itself."""

    def __init__(self, app: ASGIApp, allowed_hosts: Sequence[str]) -> None:
        self.network = TrustedHostMiddleware(app, allowed_hosts=list(allowed_hosts), www_redirect=False)
        self.in_process = TrustedHostMiddleware(
            app, allowed_hosts=[*allowed_hosts, TEST_CLIENT_HOST], www_redirect=False
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        check = self.in_process if client_of(scope) == TEST_CLIENT else self.network
        await check(scope, receive, send)
