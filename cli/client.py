"""The CLI's REST client: server URL and token from options, env (RANKZERO_URL, RANKZERO_API_TOKEN)
or the local settings; every failure becomes a message that says what to do."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from core.settings import Settings


class CliError(Exception):
    """A failure the user can fix; the message says how."""


def default_url(settings: Settings) -> str:
    host = settings.host
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"  # a wildcard bind is reached on loopback from this host
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{settings.port}"


class Api:
    def __init__(self, url: str, token: str, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.http = httpx.Client(
            base_url=self.url + "/api", headers={"Authorization": f"Bearer {token}"}, timeout=timeout
        )

    def _check(self, r: httpx.Response) -> httpx.Response:
        if r.status_code == 401:
            raise CliError(
                "the API rejected the token: pass --token or set RANKZERO_API_TOKEN (`rankzero up` prints it)"
            )
        if r.status_code == 404:
            raise CliError(_detail(r) or f"not found: {r.request.url.path}")
        if r.status_code == 422:
            raise CliError("the server refused the request:\n" + _detail(r))
        if r.status_code >= 400:
            raise CliError(f"{r.status_code} from {r.request.method} {r.request.url.path}: {_detail(r)}")
        return r

    def request(self, method: str, path: str, **kw: Any) -> Any:
        try:
            r = self.http.request(method, path, **kw)
        except httpx.TransportError as exc:
            raise CliError(
                f"cannot reach the API at {self.url} ({exc}): "
                "start it with `rankzero up`, or pass --url / set RANKZERO_URL"
            ) from None
        return self._check(r).json()

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None})

    def post(self, path: str, json: Any = None) -> Any:
        return self.request("POST", path, json=json)

    @contextmanager
    def stream(self, path: str) -> Iterator[httpx.Response]:
        try:
            with self.http.stream("GET", path, timeout=None) as r:
                if r.status_code >= 400:
                    r.read()
                self._check(r)
                yield r
        except httpx.TransportError as exc:
            raise CliError(f"cannot reach the API at {self.url} ({exc}): is it running?") from None


def _detail(r: httpx.Response) -> str:
    try:
        body = r.json()
    except ValueError:
        return r.text[:500]
    detail = body.get("detail", body) if isinstance(body, dict) else body
    if isinstance(detail, list):
        return "\n".join(
            f"  {'.'.join(str(x) for x in d.get('loc', []) if x != 'body')}: {d.get('msg')}"
            for d in detail
            if isinstance(d, dict)
        )
    return str(detail)
