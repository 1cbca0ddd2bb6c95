"""The HTTP protocol uvicorn runs for the API: bounds no client can talk its way around.

uvicorn's own bounds fall short against one client on the network (issue 19): its head-size limit
binds only the h11 parser, and `uvicorn[standard]` runs httptools, which took a 64 MiB header
(concatenating it quadratically while /api/health waited 24 s); nothing times out a connection
that never sends a byte; and `limit_concurrency` counts open connections, so 520 idle sockets made
the API answer 503 to everyone. `guarded_protocol(limits)` is uvicorn's httptools protocol with:

- a request head (request line + headers) over `max_head_bytes` answered 431 and closed, counted
  as the bytes arrive, before the parser has grown by more than one socket read (≤ 256 KiB);
- a head deadline: a connection must send a whole head within `head_timeout_s` of opening (or of
  beginning its next request on a kept-alive connection), else 408 and closed;
- connection caps: at most `max_connections_per_client` from one address (trusted proxies
  exempt) and `max_connections` in all; a connection past a cap closes the oldest *idle* one (no
  request in flight, head or not) of that client (or of anyone, for the global cap), and is
  refused with 503 only when every one is busy. Idle sockets therefore never lock others out;
- `limit_concurrency` counting requests in flight (uvicorn's tasks), not open connections.

The decisions are pure functions (`admit`, `head_bytes_after`) with table-driven tests; the class
only wires them into uvicorn's callbacks.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from core.settings import Settings


@dataclass(frozen=True)
class ConnectionLimits:
    max_head_bytes: int = 16 * 1024
    head_timeout_s: float = 10.0
    max_connections: int = 1000
    max_connections_per_client: int = 64
    max_in_flight: int = 512
    exempt_clients: frozenset[str] = frozenset()  # trusted proxies: every client behind them shares their address

    @classmethod
    def from_settings(cls, settings: Settings, max_head_bytes: int, max_in_flight: int) -> ConnectionLimits:
        return cls(
            max_head_bytes=max_head_bytes,
            head_timeout_s=settings.head_timeout_s,
            max_connections=settings.max_connections,
            max_connections_per_client=settings.max_connections_per_client,
            max_in_flight=max_in_flight,
            exempt_clients=settings.trusted_proxy_hosts,
        )


class Verdict(Enum):
    accept = "accept"
    evict = "evict"  # accept, and close the connection at `Admission.victim`
    refuse = "refuse"


@dataclass(frozen=True)
class Admission:
    verdict: Verdict
    victim: int | None = None  # index into the open connections (oldest first)


@dataclass(frozen=True)
class Open:
    """An open connection as `admit` sees it: who, and whether a request is in flight on it."""

    client: str
    idle: bool


def admit(client: str, open_conns: Sequence[Open], limits: ConnectionLimits) -> Admission:
    """What to do with a new connection from `client`, given the open ones (oldest first).

    Past the per-client cap the client's own oldest idle connection makes room; past the global cap
    anyone's oldest idle one does. With no idle connection to close, the new one is refused.
    """
    if client not in limits.exempt_clients:
        own = [i for i, c in enumerate(open_conns) if c.client == client]
        if len(own) >= limits.max_connections_per_client:
            victim = next((i for i in own if open_conns[i].idle), None)
            return Admission(Verdict.refuse) if victim is None else Admission(Verdict.evict, victim)
    if len(open_conns) >= limits.max_connections:
        victim = next((i for i, c in enumerate(open_conns) if c.idle), None)
        return Admission(Verdict.refuse) if victim is None else Admission(Verdict.evict, victim)
    return Admission(Verdict.accept)


def head_bytes_after(counted: int, chunk: int, *, in_head: bool, completed_in_chunk: bool) -> int:
    """Bytes of the current request head after a socket read of `chunk` bytes was parsed.

    A read that ended inside a head counts whole, unless it also finished an earlier (pipelined)
    request: then where the new head began is unknown and the read is not counted (the count is
    short by less than one read, which still bounds the parser). Outside a head the count is 0.
    """
    if not in_head:
        return 0
    return counted if completed_in_chunk else counted + chunk


def _response(status: int, reason: str, detail: str) -> bytes:
    body = detail.encode()
    return (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain; charset=utf-8\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    ).encode() + body


class _Registry:
    """The open connections of one server, oldest first."""

    def __init__(self) -> None:
        self.conns: OrderedDict[GuardedProtocol, None] = OrderedDict()


class GuardedProtocol(HttpToolsProtocol):
    limits: ConnectionLimits = ConnectionLimits()
    registry: _Registry = _Registry()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = False
        self._head_bytes = 0
        self._completed = 0
        self._head_timer: asyncio.TimerHandle | None = None

    # --- connection caps ---
    @property
    def client_host(self) -> str:
        return self.client[0] if self.client else ""

    @property
    def idle(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        conns = list(self.registry.conns)
        decision = admit(self.client_host, [Open(c.client_host, c.idle) for c in conns], self.limits)
        if decision.verdict is Verdict.refuse:
            self._close_with(503, "Service Unavailable", "too many connections; retry shortly\n")
            return
        if decision.victim is not None:
            conns[decision.victim]._drop()
        self.registry.conns[self] = None
        self._start_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._drop_bookkeeping()
        super().connection_lost(exc)

    def _drop(self) -> None:
        """Close this idle connection to make room for a newer one."""
        self._drop_bookkeeping()
        if not self.transport.is_closing():
            self.transport.close()

    def _drop_bookkeeping(self) -> None:
        self.registry.conns.pop(self, None)
        self._cancel_head_timer()

    def _close_with(self, status: int, reason: str, detail: str) -> None:
        self._drop_bookkeeping()
        if not self.transport.is_closing():
            self.transport.write(_response(status, reason, detail))
            self.transport.close()

    # --- head size and deadline ---
    def _start_head_timer(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.limits.head_timeout_s, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.idle and not self.transport.is_closing():
            detail = f"request head not received within {self.limits.head_timeout_s:g} s\n"
            self._close_with(408, "Request Timeout", detail)

    def data_received(self, data: bytes) -> None:
        completed_before = self._completed
        super().data_received(data)
        if self.transport.is_closing():
            return
        self._head_bytes = head_bytes_after(
            self._head_bytes, len(data), in_head=self._in_head, completed_in_chunk=self._completed != completed_before
        )
        if self._head_bytes > self.limits.max_head_bytes:
            detail = f"request head larger than {self.limits.max_head_bytes} bytes; send fewer or shorter headers\n"
            self._close_with(431, "Request Header Fields Too Large", detail)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head, self._head_bytes = True, 0
        self._start_head_timer()  # a kept-alive connection's next request has its own deadline

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._cancel_head_timer()
        # uvicorn compares open connections with limit_concurrency; only requests in flight count here.
        self.limit_concurrency = 0 if len(self.tasks) >= self.limits.max_in_flight else None
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._completed += 1
        super().on_message_complete()


def guarded_protocol(limits: ConnectionLimits) -> type[GuardedProtocol]:
    """A protocol class for one server: its own limits and its own registry of open connections."""
    return type("GuardedHttpProtocol", (GuardedProtocol,), {"limits": limits, "registry": _Registry()})
