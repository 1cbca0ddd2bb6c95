"""The connection rules of api/connections.py as pure functions: who makes room for a new connection,
and how many bytes of a request head have arrived."""

from __future__ import annotations

import pytest

from api.connections import Admission, ConnectionLimits, Open, Verdict, admit, head_bytes_after

LIMITS = ConnectionLimits(max_connections=4, max_connections_per_client=2, exempt_clients=frozenset({"proxy"}))
A, B = "10.0.0.1", "10.0.0.2"


@pytest.mark.parametrize(
    ("client", "open_conns", "expected"),
    [
        ("A", [], Admission(Verdict.accept)),
        (A, [Open(A, True)], Admission(Verdict.accept)),
        # at its own cap: the client's oldest idle connection makes room, not someone else's
        (A, [Open(B, True), Open(A, False), Open(A, True)], Admission(Verdict.evict, 2)),
        (A, [Open(A, True), Open(A, True)], Admission(Verdict.evict, 0)),
        # at its cap with every connection busy: refused
        (A, [Open(A, False), Open(A, False)], Admission(Verdict.refuse)),
        # a trusted proxy carries many clients: only the global cap binds it
        ("proxy", [Open("proxy", False), Open("proxy", False)], Admission(Verdict.accept)),
        # the global cap: anyone's oldest idle connection makes room
        (B, [Open(A, False), Open("proxy", True), Open("x", True), Open("y", False)], Admission(Verdict.evict, 1)),
        (B, [Open(A, False), Open("proxy", False), Open("x", False), Open("y", False)], Admission(Verdict.refuse)),
    ],
)
def test_admit(client: str, open_conns: list[Open], expected: Admission) -> None:
    assert admit(client, open_conns, LIMITS) == expected


@pytest.mark.parametrize(
    ("counted", "chunk", "in_head", "completed", "expected"),
    [
        (0, 100, True, False, 100),  # a read inside a head counts whole
        (100, 65536, True, False, 65636),
        (100, 500, False, False, 0),  # the head is complete: nothing pending
        (0, 500, True, True, 0),  # an earlier pipelined request ended in this read: where the head began is unknown
        (300, 500, False, True, 0),
    ],
)
def test_head_bytes_after(counted: int, chunk: int, in_head: bool, completed: bool, expected: int) -> None:
    assert head_bytes_after(counted, chunk, in_head=in_head, completed_in_chunk=completed) == expected
