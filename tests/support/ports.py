"""TCP ports for the servers the tests start."""

from __future__ import annotations

import socket
import time

from tests.support.deadlines import deadline_in


def free_port() -> int:
    """A port nothing listens on now, on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, up: bool, timeout: float) -> None:
    """Wait until 127.0.0.1:`port` accepts connections (`up`) or refuses them (not `up`)."""
    deadline = deadline_in(timeout)
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                if up:
                    return
        except OSError:
            if not up:
                return
        time.sleep(0.05)
    raise RuntimeError(f"port {port} did not go {'up' if up else 'down'} in {timeout} s")
