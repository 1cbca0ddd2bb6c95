"""A network namespace of a test's own, linked to this host by a veth pair: "another machine on the
network" for reachability tests. Only addresses on the pair the test creates are used (10.231.<n>.0/30);
no iptables, no bridge; the namespace and the pair are deleted on the way out.

    with other_host() as ns:
        ns.can_connect(ns.host_address, port)   # from the namespace to this host's end of the pair
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass


def available() -> str | None:
    """None when this test may create namespaces (root, `ip`); else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    try:
        subprocess.run(["ip", "netns", "list"], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        return f"`ip netns` is not usable here ({exc})"
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close()
except OSError as exc:
    print(type(exc).__name__, exc)
    sys.exit(1)
"""


@dataclass(frozen=True)
class OtherHost:
    name: str
    host_address: str  # this host's end of the pair (in the root namespace)
    address: str  # the namespace's end

    def can_connect(self, address: str, port: int, timeout_s: float = 3.0) -> bool:
        """Does a TCP connect from inside the namespace to address:port succeed?"""
        done = subprocess.run(
            ["ip", "netns", "exec", self.name, sys.executable, "-c", CONNECT, address, str(port), str(timeout_s)],
            capture_output=True,
            timeout=timeout_s + 30,
            check=False,
        )
        return done.returncode == 0


@contextlib.contextmanager
def other_host() -> Iterator[OtherHost]:
    tag = secrets.token_hex(3)
    name, host_end, ns_end = f"rzt-{tag}", f"rzh{tag}", f"rzn{tag}"
    net = 1 + secrets.randbelow(250)
    host_address, address = f"10.231.{net}.1", f"10.231.{net}.2"
    _ip("netns", "add", name)
    try:
        _ip("link", "add", host_end, "type", "veth", "peer", "name", ns_end)
        try:
            _ip("link", "set", ns_end, "netns", name)
            _ip("addr", "add", f"{host_address}/30", "dev", host_end)
            _ip("link", "set", host_end, "up")
            _ip("-n", name, "addr", "add", f"{address}/30", "dev", ns_end)
            _ip("-n", name, "link", "set", ns_end, "up")
            _ip("-n", name, "link", "set", "lo", "up")
            yield OtherHost(name, host_address, address)
        finally:
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip("link", "del", host_end)  # takes its peer with it
    finally:
        _ip("netns", "del", name)
