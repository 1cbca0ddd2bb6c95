"""Which network interface a multi-node job's ranks talk on: the one that holds this host's registered address.

torchrun gets node 0's registered address as the master address (worker/launch.py), but gloo (and NCCL's
bootstrap) pick the address each rank *advertises* to its peers by resolving the machine's hostname. Where
that name resolves to an address on another interface, or to none reachable (a container's hostname, a
network namespace, a second NIC), the peers are told an address they cannot reach and the job hangs in its
first collective. So every rank is pinned to the interface of the host's registered address
(`RANKZERO_HOST_ADDRESS`, or what the hostname resolves to): `GLOO_SOCKET_IFNAME` / `NCCL_SOCKET_IFNAME`,
unless the operator set them.
"""

from __future__ import annotations

import fcntl
import ipaddress
import socket
import struct
from collections.abc import Callable, Iterable, Mapping

SIOCGIFADDR = 0x8915  # Linux: an interface's IPv4 address
IFNAME_ENV = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


def _ipv4_of(name: str) -> str | None:
    """The IPv4 address of interface `name` (None: it has none, or it is gone)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def interface_holding(
    address: str,
    names: Iterable[str] | None = None,
    ipv4_of: Callable[[str], str | None] = _ipv4_of,
    resolve: Callable[[str], str] = socket.gethostbyname,
) -> str | None:
    """The name of the local interface whose IPv4 address is `address` (an IP or a name that resolves to one);
    None when no interface holds it (then nothing is pinned: gloo's own choice stands)."""
    try:
        wanted = str(ipaddress.ip_address(address))
    except ValueError:
        try:
            wanted = resolve(address)
        except OSError:
            return None
    for name in names if names is not None else (n for _, n in socket.if_nameindex()):
        if ipv4_of(name) == wanted:
            return name
    return None


def pinned_env(
    address: str, env: Mapping[str, str], find: Callable[[str], str | None] = interface_holding
) -> dict[str, str]:
    """The variables to add to a multi-node rank's environment `env` so it talks on `address`'s interface."""
    missing = [k for k in IFNAME_ENV if k not in env]
    if not missing:
        return {}
    name = find(address)
    return {k: name for k in missing} if name else {}
