"""The API's request latency as a Prometheus histogram, labelled by route template (bounded: the app's
routes), method and status class. Timed to the response's start, so a live stream (SSE) counts its
opening, not its whole life."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def route_label(scope: Scope) -> str:
    """The matched route's template (`/api/jobs/{job_id}`); 'unmatched' for anything else (404s, static
    files), so a scanner's paths never become labels.

    The route in the scope knows its path within its router (`/jobs/{job_id}`); the prefix the router was
    included under is the part of the request path before the route's own match."""
    route = scope.get("route")
    template, regex = getattr(route, "path", None), getattr(route, "path_regex", None)
    if not isinstance(template, str) or not template or regex is None:
        return "unmatched"
    path = str(scope.get("path", ""))
    for i in range(len(path)):
        if path[i] == "/" and regex.fullmatch(path[i:]):
            return path[:i] + template
    return template


def status_class(code: int) -> str:
    return f"{code // 100}xx" if 100 <= code <= 599 else "other"


class RequestTiming:
    """ASGI middleware: observe each HTTP request's time to response start."""

    def __init__(self, app: ASGIApp, registry: CollectorRegistry) -> None:
        self.app = app
        self.histogram = Histogram(
            "rankzero_http_request_duration_seconds",
            "API request latency (to the response's start) by route template, method and status class.",
            ["route", "method", "status"],
            registry=registry,
            buckets=LATENCY_BUCKETS,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        seen = False

        def observe(code: int) -> None:
            method = scope.get("method", "")
            self.histogram.labels(
                route_label(scope), method if method in METHODS else "other", status_class(code)
            ).observe(time.perf_counter() - start)

        async def timed_send(message: Message) -> None:
            nonlocal seen
            if message["type"] == "http.response.start" and not seen:
                seen = True
                observe(int(message.get("status", 0)))
            await send(message)

        try:
            await self.app(scope, receive, timed_send)
        finally:
            if not seen:  # the app raised before answering: the server sends a 500
                observe(500)
