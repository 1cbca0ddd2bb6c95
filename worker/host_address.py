"""At worker start: the address other hosts reach this one at (node 0's rendezvous for multi-node jobs)
must resolve. Under Docker's host networking a container's `hostname:` is in no /etc/hosts, and an
address that resolves nowhere hangs every multi-node job in torchrun's rendezvous until it times out
(~9 min, then "torchrun exited with code 1"): the worker refuses to start instead, naming the setting."""

from __future__ import annotations

import socket
from collections.abc import Callable

from core.settings import Settings


class HostAddressUnresolvable(OSError):
    """The worker cannot start: the message says what to set."""


def address_problem(host_address: str | None, hostname: str, resolve: Callable[[str], str]) -> str | None:
    """Why this host's rendezvous address is unusable, or None (pure but for `resolve`)."""
    name = host_address or hostname
    try:
        resolve(name)
    except OSError as exc:
        if host_address:
            return (
                f"RANKZERO_HOST_ADDRESS={host_address!r} does not resolve ({exc}): set it to an IP address or "
                "a name the other hosts and this one resolve"
            )
        return (
            f"this host's name {hostname!r} resolves to no address ({exc}), so no job's rendezvous could reach "
            "it (under Docker's host networking a container's hostname is in no /etc/hosts): set "
            "RANKZERO_HOST_ADDRESS to an address the other hosts reach this one at (e.g. its LAN IP)"
        )
    return None


def check(settings: Settings) -> None:
    """Raise HostAddressUnresolvable when the rendezvous address does not resolve."""
    problem = address_problem(settings.host_address, socket.gethostname(), socket.gethostbyname)
    if problem is not None:
        raise HostAddressUnresolvable(f"the worker cannot start: {problem}")
