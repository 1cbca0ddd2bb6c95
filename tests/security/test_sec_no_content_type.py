"""Every operation that takes a body, sent bodies with no content type or a wrong one (what a
typeless cross-origin `fetch` or a fuzzer sends): never a server error, never a slow answer, with
and without credentials. Complements the schemathesis run, which always sends its declared type."""

from __future__ import annotations

import os
import random
import time

import httpx

from tests.support import deadlines
from tests.support.attack import Server

BODIES = {
    "empty": b"",
    "garbage": bytes(random.Random(1).randrange(256) for _ in range(4096)),
    "escaped-quotes": b'"' + b'\\"' * 32_000,
    "deep-json": b"[" * 5000 + b"]" * 5000,
    "spec": b'{"name": "x", "data": {"name": "digits"}, "max_steps": 1}',
    "yaml": b"name: x\ndata: {name: digits}\n",
}
CONTENT_TYPES = [None, "TEXT/PLAIN", "application/x-www-form-urlencoded", "Application/JSON; charset=latin-1"]


def _operations(server: Server) -> list[tuple[str, str]]:
    schema = httpx.get(f"{server.base}/openapi.json", timeout=deadlines.seconds(10)).json()
    ops = []
    for path, item in schema["paths"].items():
        concrete = path.replace("{job_id}", "1").replace("{checkpoint_id}", "1").replace("{sha256}", "0" * 64)
        ops += [(method.upper(), concrete) for method in item if method in ("post", "put", "patch")]
    return ops + [("POST", "/login"), ("POST", "/logout"), ("POST", "/ui/parse-spec")]


def test_bodies_without_or_with_wrong_content_types_never_fail_the_server(server: Server) -> None:
    ops = _operations(server)
    assert ("POST", "/api/jobs") in ops and ("POST", "/api/code") in ops, ops
    slowest = 0.0
    with httpx.Client(base_url=server.base, timeout=deadlines.seconds(10)) as client:
        for method, path in ops:
            for auth in ({}, server.auth):
                for ctype in CONTENT_TYPES:
                    for name, body in BODIES.items():
                        headers = dict(auth) | ({"Content-Type": ctype} if ctype else {})
                        t0 = time.monotonic()
                        r = client.request(method, path, content=body, headers=headers)
                        slowest = max(slowest, time.monotonic() - t0)
                        assert r.status_code < 500, (method, path, ctype, name, bool(auth), r.status_code, r.text[:300])
    limit = float(os.environ.get("RANKZERO_SEC_SLOWEST_S", "3"))
    assert slowest < limit, f"slowest answer {slowest:.2f} s"
