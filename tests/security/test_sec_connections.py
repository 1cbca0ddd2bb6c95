"""Issue 19 item 3: one client cannot freeze the API or lock others out, whatever HTTP parser runs.

Attacks on the API as `rankzero api` serves it (a process of its own: its memory is measured):
a 64 MiB header (httptools took it, quadratically, while /api/health waited 24 s), sockets that
never send a byte (520 of them answered everyone 503, for ever), and heads sent a byte at a time.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from pathlib import Path

import httpx

from tests.support.attack import HealthProbe, read_status
from tests.support.jobs import wait

HUGE_HEADER = 64 * 1024 * 1024


def rss_mb(pid: int) -> float:
    """Resident memory of a process, MiB (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def _closed_by_server(sock: socket.socket, timeout: float) -> bool:
    """Whether the server answered and/or closed `sock` within `timeout` (b"" or a reset)."""
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
        return True
    except TimeoutError:
        return False
    except OSError:
        return True


def test_a_64_mib_header_is_refused_while_health_answers(served_api) -> None:
    server = served_api()
    rss_before = rss_mb(server.proc.pid)
    sock = server.connect(timeout=30)
    sent = 0
    chunk = b"a" * (1 << 20)

    def attack() -> None:
        nonlocal sent
        with contextlib.suppress(OSError):
            sock.sendall(b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ")
            while sent < HUGE_HEADER:
                sock.sendall(chunk)
                sent += len(chunk)

    with HealthProbe(server.base) as probe:
        attacker = threading.Thread(target=attack, daemon=True)
        attacker.start()
        status = read_status(sock, timeout=20)
        attacker.join(timeout=30)
        # the attack may be over before the probe's first answer: it must answer during and after it
        wait(lambda: len(probe.latencies) >= 3, timeout=30, what="three /api/health answers")
    grown = rss_mb(server.proc.pid) - rss_before
    sock.close()
    print(f"64 MiB header: status {status}, {sent >> 20} MiB sent before the server let go, "
          f"API RSS +{grown:.1f} MiB, health worst {probe.worst * 1000:.0f} ms")  # fmt: skip
    assert status in (431, None)  # 431, or the connection reset before the answer could be read
    assert sent < HUGE_HEADER, "the server read the whole 64 MiB header"
    assert grown < 32, f"the API grew by {grown:.0f} MiB"
    assert probe.failures == 0  # it answered during and after the attack (above); its latency is printed, not bounded


def test_a_connection_that_sends_nothing_is_closed(served_api) -> None:
    server = served_api(head_timeout_s=1)
    silent = server.connect()
    # A generous wait (load stretches the 1 s deadline); without a head deadline it never closes.
    assert _closed_by_server(silent, timeout=30), "a silent connection was held past the head deadline"
    silent.close()


def test_a_head_sent_a_byte_at_a_time_is_cut_off(served_api) -> None:
    server = served_api(head_timeout_s=1)
    sock = server.connect()
    sock.sendall(b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    t0 = time.monotonic()
    cut = False
    while time.monotonic() - t0 < 30:  # ends at the cut; 30 s only bounds a server that never cuts
        try:
            sock.sendall(b"X-Slow: a\r\n")
        except OSError:
            cut = True
            break
        if _closed_by_server(sock, timeout=0.2):
            cut = True
            break
    sock.close()
    assert cut, "a head trickled for 30 s was never cut off"


def test_600_idle_connections_leave_a_fresh_client_served(served_api) -> None:
    server = served_api()
    idle = [server.connect() for _ in range(600)]
    time.sleep(0.5)
    try:
        r = httpx.get(f"{server.base}/api/health", timeout=5)
        assert r.status_code == 200, r.text
    finally:
        for s in idle:
            s.close()


def test_one_address_keeps_at_most_its_cap_of_idle_connections(served_api) -> None:
    server = served_api(max_connections_per_client=16)
    idle = []
    for _ in range(100):
        s = socket.socket()
        s.bind(("127.0.0.2", 0))  # the attacker's own address; the fresh client below is 127.0.0.1
        s.connect((server.host, server.port))
        idle.append(s)
    time.sleep(0.5)
    still_open = sum(not _closed_by_server(s, timeout=0.01) for s in idle)
    r = httpx.get(f"{server.base}/api/health", timeout=5)
    for s in idle:
        s.close()
    assert r.status_code == 200
    assert still_open <= 16, still_open
