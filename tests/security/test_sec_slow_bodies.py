"""Hardening 3: slow bodies. Attack: many connections announce a 1 MiB body and trickle it, which
made the server hold every connection (and its growing buffer) with no deadline."""

from __future__ import annotations

import contextlib
import resource
import time

from tests.support.attack import HealthProbe, read_status

CONNECTIONS = 200


def _head(server, path: str, length: int, extra: str = "") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: {server.host}:{server.port}\r\nContent-Length: {length}\r\n{extra}\r\n"
    ).encode()


def test_unauthenticated_trickled_bodies_are_refused_before_buffering(server) -> None:
    socks = []
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with HealthProbe(server.base) as probe:
        t0 = time.monotonic()
        for _ in range(CONNECTIONS):
            s = server.connect()
            s.sendall(_head(server, "/api/jobs", 1 << 20) + b"{" + b" " * 4095)
            socks.append(s)
        # Each has sent 4 KiB of its 1 MiB: an answer at all means refused before the body was read.
        statuses = [read_status(s, timeout=30) for s in socks]
        answered_s = time.monotonic() - t0
        probe_until = time.monotonic() + 30  # health answered while all 200 are still held open
        while len(probe.latencies) < 3 and time.monotonic() < probe_until:
            time.sleep(0.05)
        for s in socks:  # the attackers keep trickling: the server must have let go already
            with contextlib.suppress(OSError):
                s.sendall(b" " * 4096)
    for s in socks:
        s.close()
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    print(f"{CONNECTIONS} trickling connections: all answered in {answered_s:.2f} s, statuses {set(statuses)}, "
          f"peak RSS +{grown_mb:.0f} MB, health worst {probe.worst * 1000:.0f} ms")  # fmt: skip
    assert statuses == [401] * CONNECTIONS, statuses
    assert probe.failures == 0 and len(probe.latencies) >= 3, probe.latencies  # timings: bench/, not a bound
    assert grown_mb < 100


def test_unauthenticated_body_readers_are_few_and_timed(start_server) -> None:
    server = start_server(body_timeout_s=2, anon_body_concurrency=4)
    held = []
    for _ in range(4):  # /login takes a body without credentials: these hold every slot
        s = server.connect()
        s.sendall(_head(server, "/login", 10_000, "Content-Type: application/x-www-form-urlencoded\r\n") + b"token=")
        held.append(s)
    time.sleep(0.3)
    extra = server.connect()
    extra.sendall(_head(server, "/login", 10_000) + b"token=")
    # Past the limit: refused, not queued (a queued one would wait for a slot, then get 408 itself).
    assert read_status(extra, timeout=30) == 503
    assert [read_status(s, timeout=30) for s in held] == [408] * 4  # the deadline, not the client, frees the slots
    for s in [*held, extra]:
        s.close()


def test_authenticated_body_has_a_deadline_too(start_server) -> None:
    server = start_server(body_timeout_s=1.5)
    s = server.connect()
    s.sendall(_head(server, "/api/jobs", 5000, f"Authorization: Bearer {server.token}\r\n") + b'{"name": ')
    assert read_status(s, timeout=30) == 408  # the body never completes: only the deadline answers
    s.close()


def test_oversized_declared_body_is_refused_unread(server) -> None:
    s = server.connect()
    s.sendall(_head(server, "/login", 1 << 30) + b"x" * 100)
    assert read_status(s, timeout=2) == 413
    s.close()


def test_serve_runs_uvicorn_with_connection_bounds(api_settings, monkeypatch, capsys) -> None:
    import uvicorn

    from api.server import serve

    seen: dict = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: seen.update(options))
    serve(api_settings(api_token="z" * 40, host="0.0.0.0"))
    assert seen["limit_concurrency"] <= 1024 and seen["timeout_keep_alive"] <= 5
    assert seen["h11_max_incomplete_event_size"] <= 64 * 1024 and seen["server_header"] is False
    assert "RANKZERO_ALLOWED_HOSTS" in capsys.readouterr().err  # a public bind is told which Host names work
