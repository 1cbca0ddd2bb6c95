"""Hardening 4: DNS rebinding. Attack: a page on evil.example whose name now resolves to 127.0.0.1
talks to the API; the browser sends `Host: evil.example`. Only known names are served."""

from __future__ import annotations

import httpx
import pytest

from tests.support import deadlines


@pytest.mark.parametrize("path", ["/api/health", "/login", "/api/jobs", "/docs", "/openapi.json"])
@pytest.mark.parametrize("host", ["evil.example", "evil.example:80", "127.0.0.1.evil.example", "localhost.", "[::2]"])
def test_unknown_host_header_is_400(server, host: str, path: str) -> None:
    r = httpx.get(server.base + path, headers={"Host": host}, timeout=deadlines.seconds(10))
    assert r.status_code == 400, (host, path, r.status_code)


def test_loopback_names_and_configured_hosts_are_served(start_server) -> None:
    server = start_server(allowed_hosts="rankzero.lan, Dash.Example.COM")
    for host in ("127.0.0.1", f"127.0.0.1:{server.port}", f"localhost:{server.port}", "LOCALHOST", "[::1]",
                 f"[::1]:{server.port}", "rankzero.lan", "dash.example.com:8443"):  # fmt: skip
        r = httpx.get(server.base + "/api/health", headers={"Host": host}, timeout=deadlines.seconds(10))
        assert r.status_code == 200, (host, r.status_code)
    assert (
        httpx.get(server.base + "/api/health", headers={"Host": "other.lan"}, timeout=deadlines.seconds(10)).status_code
        == 400
    )


def test_the_api_url_host_is_served(start_server) -> None:
    """Workers on other hosts fetch code bundles through RANKZERO_API_URL: its host name must work."""
    server = start_server(api_url="http://rankzero-api:8000")
    assert (
        httpx.get(
            server.base + "/api/health", headers={"Host": "rankzero-api:8000"}, timeout=deadlines.seconds(10)
        ).status_code
        == 200
    )
