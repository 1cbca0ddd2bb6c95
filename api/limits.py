"""Request limits enforced before any route runs: body size (413) and JSON nesting depth (400).

A pure ASGI middleware, so it sees the raw byte stream: it counts chunked / streamed bodies as
well as bodies that announce a Content-Length, and never lets the app parse more than the limit.
The body is buffered (it is at most `max_body_bytes`) and replayed to the app.
"""

from __future__ import annotations

import json
import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send

MAX_JSON_DEPTH = 32
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET = re.compile(rb"[\[\]{}]")


def json_depth(body: bytes) -> int:
    """Deepest nesting of arrays/objects in a JSON text (strings skipped), without parsing it."""
    depth = deepest = 0
    for m in _BRACKET.finditer(_JSON_STRING.sub(b'""', body)):
        if m.group() in (b"[", b"{"):
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


async def _reply(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class RequestLimitsMiddleware:
    def __init__(self, app: ASGIApp, max_body_bytes: int, max_json_depth: int = MAX_JSON_DEPTH) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.max_json_depth = max_json_depth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        too_big = f"request body larger than {self.max_body_bytes} bytes; send a smaller body"
        declared = headers.get(b"content-length")
        if declared is not None:
            try:
                if int(declared) > self.max_body_bytes:
                    await _reply(send, 413, too_big)
                    return
            except ValueError:
                await _reply(send, 400, "malformed Content-Length header")
                return
        elif b"transfer-encoding" not in headers:
            await self.app(scope, receive, send)  # no body at all (a plain GET): nothing to count
            return

        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                await _reply(send, 413, too_big)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        content_type = headers.get(b"content-type")
        # No content type may still be parsed as JSON by some route; check it too.
        if (content_type is None or b"json" in content_type) and json_depth(body) > self.max_json_depth:
            await _reply(send, 400, f"JSON nests deeper than {self.max_json_depth} levels; flatten it")
            return

        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
