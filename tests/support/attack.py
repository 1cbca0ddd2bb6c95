"""What the security tests attack with: a live server's address and token, a signed-in dashboard
session, raw-socket reads, and a probe that measures /api/health latency while an attack runs."""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from tests.support import deadlines

TOKEN = "sec-test-token-6b1f0c2e9d4a7358-kq3vXyZ8wLpR"  # 45 characters


@dataclass
class Server:
    base: str
    settings: Any
    token: str = TOKEN

    @property
    def host(self) -> str:
        return urlsplit(self.base).hostname or "127.0.0.1"

    @property
    def port(self) -> int:
        return urlsplit(self.base).port or 80

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def connect(self, timeout: float = 5.0) -> socket.socket:
        return socket.create_connection((self.host, self.port), timeout=timeout)


def sign_in(server: Server) -> httpx.Client:
    """A client holding a dashboard session (cookie + CSRF cookie), as a browser would after /login."""
    client = httpx.Client(base_url=server.base, timeout=deadlines.seconds(10))  # a loaded machine answers late
    r = client.post("/login", data={"token": server.token, "next": "/"}, follow_redirects=False)
    assert r.status_code == 303, r.text
    assert client.cookies.get("rankzero_session"), r.headers
    return client


def read_status(sock: socket.socket, timeout: float) -> int | None:
    """The HTTP status of the first response on `sock`, or None if none arrives within `timeout`."""
    sock.settimeout(timeout)
    data = b""
    try:
        while b"\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    except (TimeoutError, OSError):
        return None
    parts = data.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None


@dataclass
class HealthProbe:
    """Polls /api/health in a thread while an attack runs; records each answer's latency.

    The server under test runs in this process (live_api), so work that holds the GIL would freeze
    this thread too and hide the stall: a latency is therefore the time since the previous answer
    (less the pause between polls), not only the time of one request.
    """

    base: str
    latencies: list[float] = field(default_factory=list)
    failures: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> HealthProbe:
        def loop() -> None:
            # Its answers are counted and their latency printed, never bounded: a slow answer under load is not
            # a failure (a CPU burner beside the suite once took one past a fixed 5 s), so the wait is scaled.
            with httpx.Client(timeout=deadlines.seconds(5)) as client:
                previous = time.monotonic()
                while not self._stop.is_set():
                    time.sleep(0.05)
                    t0 = time.monotonic()
                    try:
                        ok = client.get(f"{self.base}/api/health").status_code == 200
                    except httpx.HTTPError:
                        ok = False
                    now = time.monotonic()
                    self.latencies.append(max(now - t0, now - previous - 0.05))
                    self.failures += not ok
                    previous = now

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(timeout=10)

    @property
    def worst(self) -> float:
        return max(self.latencies, default=float("inf"))
