"""Issue 19 items 3 and 7, per client: wrong tokens throttled, live-update streams capped, `Secure`
cookies behind a trusted TLS proxy (and only then), `Host: testserver` only for the in-process
TestClient, never from the network."""

from __future__ import annotations

import contextlib

import httpx
import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.client_limits import FailureWindow
from tests.support import deadlines
from tests.support.attack import TOKEN, Server
from tests.support.jobs import fake_spec, wait

WRONG = "w" * 40


@pytest.mark.parametrize(
    ("failures_at", "now", "expected"),
    [
        ([], 0.0, None),
        ([0.0, 1.0], 2.0, None),  # under the allowance
        ([0.0, 1.0, 2.0], 2.5, 57.5),  # at it: until the oldest of the last 3 leaves the minute
        ([0.0, 1.0, 2.0], 60.0, None),  # the first left the window
        ([0.0, 1.0, 2.0, 30.0], 60.5, 0.5),  # 1, 2, 30 are within the minute: wait for 1 to leave
    ],
)
def test_failure_window(failures_at: list[float], now: float, expected: float | None) -> None:
    window = FailureWindow(per_minute=3)
    for t in failures_at:
        window.record("c", t)
    assert window.retry_after("c", now) == expected
    assert window.retry_after("other", now) is None  # per client


def test_failure_window_forgets_the_quietest_clients_first() -> None:
    window = FailureWindow(per_minute=1, max_clients=2)
    for t, client in enumerate(["a", "b", "c"]):
        window.record(client, float(t))
    assert window.retry_after("a", 3.0) is None and window.retry_after("c", 3.0) is not None


def test_wrong_bearer_tokens_are_throttled_per_client(api_settings) -> None:
    with TestClient(create_app(api_settings(auth_failures_per_minute=5))) as c:
        answers = [c.get("/api/jobs", headers={"Authorization": f"Bearer {WRONG}"}).status_code for _ in range(6)]
        assert answers == [401] * 5 + [429]
        r = c.get("/api/jobs", headers={"Authorization": f"Bearer {WRONG}x"})
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1  # a scanner stays at 5 a minute
        assert "retry in" in r.json()["detail"]
        # ... but a right token is never locked out by wrong ones from its address (issue 37)
        assert (
            c.get("/api/jobs", headers={"Authorization": f"Bearer {c.app.state.settings.token()}"}).status_code == 200
        )
        assert c.get("/api/health").status_code == 200  # no token presented: not throttled


def test_wrong_tokens_in_the_sign_in_form_are_throttled(api_settings) -> None:
    with TestClient(create_app(api_settings(auth_failures_per_minute=3))) as c:
        answers = [c.post("/login", data={"token": WRONG}).status_code for _ in range(4)]
        assert answers == [200] * 3 + [429]  # 200: the form shown again with its message
        assert "too many wrong tokens" in c.post("/login", data={"token": WRONG + "x"}).text
        right = c.post("/login", data={"token": c.app.state.settings.token()}, follow_redirects=False)
        assert right.status_code == 303  # a right token signs in whatever others sent (issue 37)


def test_live_update_streams_are_capped_per_client(start_server) -> None:
    server: Server = start_server(max_streams_per_client=2)
    with httpx.Client(base_url=server.base, headers=server.auth, timeout=deadlines.seconds(10)) as http:
        job = http.post("/api/jobs", json=fake_spec("streamed")).json()  # no worker: it stays queued
        url = f"/api/jobs/{job['id']}/stream"
        with contextlib.ExitStack() as streams:
            opened = [streams.enter_context(http.stream("GET", url)) for _ in range(2)]
            assert [r.status_code for r in opened] == [200, 200]
            third = http.get(url)
            assert third.status_code == 429 and "live-update streams" in third.json()["detail"]
        # closing them frees their places (once the server notices the disconnects)
        wait(lambda: _opens(http, url), timeout=10, what="a stream accepted again after the others closed")


def _opens(http: httpx.Client, url: str) -> bool:
    with http.stream("GET", url) as r:
        return r.status_code == 200


def _sign_in(server: Server, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(f"{server.base}/login", data={"token": server.token}, headers=headers, follow_redirects=False)


def test_cookies_are_secure_behind_a_trusted_tls_proxy(served_api) -> None:
    server = served_api(trusted_proxies="127.0.0.1")
    r = _sign_in(server, {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.7"})
    cookies = r.headers.get_list("set-cookie")
    assert r.status_code == 303 and len(cookies) == 2
    assert all("; secure" in c.lower() for c in cookies), cookies


def test_forwarded_headers_from_an_untrusted_peer_are_ignored(served_api) -> None:
    r = _sign_in(served_api(), {"X-Forwarded-Proto": "https"})
    assert r.status_code == 303
    assert not any("; secure" in c.lower() for c in r.headers.get_list("set-cookie"))


def test_test_client_host_is_refused_from_the_network(served_api) -> None:
    server = served_api()
    r = httpx.get(f"{server.base}/api/jobs", headers={**server.auth, "Host": "testserver"})
    assert r.status_code == 400
    assert httpx.get(f"{server.base}/api/jobs", headers=server.auth).status_code == 200


def test_test_client_host_still_works_in_process(api_settings) -> None:
    with TestClient(create_app(api_settings()), headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        c.app.state.settings.api_token  # noqa: B018 - the app under test is the usual one
        assert c.get("/api/health").status_code == 200
