"""Rendezvous ports that cannot be stolen (issue 20: 3 of 300 burst jobs failed because the port chosen by a
bind-and-release `free_port()` was taken by another process before torchrun bound it).

The launcher now picks a random port outside the kernel's ephemeral range (worker/launch_command.py `free_port`): the
ports other processes are handed for `bind(port 0)` and outgoing connections never collide with it. A port
taken anyway is retried on a fresh port for free at most PORT_RETRIES times, then counts like any failure
with a message saying so (worker/decide.py `port_taken`), so a port that is always taken is not retried
forever."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys

import pytest

from tests.support.commands import ROOT
from worker.attempt import Ended
from worker.decide import PORT_RETRIES, PORT_TAKEN_WORDS, Counting, Facts, Fail, Requeue, Standing, decide
from worker.launch_command import RENDEZVOUS_PORTS, free_port, port_candidates


@pytest.mark.parametrize(
    ("ephemeral", "inside"),
    [
        (range(32768, 61000), RENDEZVOUS_PORTS),  # Linux's default: ours lie wholly below it
        (range(1024, 65536), range(1024, 65536)),  # an operator gave every port to the kernel: anywhere
        (range(25000, 61000), range(20000, 25000)),  # overlapping: only the part outside
    ],
)
def test_candidates_lie_outside_the_ephemeral_range(ephemeral: range, inside: range) -> None:
    picks = port_candidates(ephemeral, random.Random(7), n=500)
    assert len(picks) == 500 and all(p in inside for p in picks)
    if len(ephemeral) < 64000:
        assert not any(p in ephemeral for p in picks)
    assert len(set(picks)) > 100  # random: two attempts on one host rarely pick the same


def test_free_port_skips_taken_ports_and_says_when_none_is_free() -> None:
    taken = set(port_candidates(range(32768, 61000), random.Random(3))[:5])
    port = free_port(random.Random(3), bindable=lambda p: p not in taken)
    assert port not in taken and port in RENDEZVOUS_PORTS
    with pytest.raises(OSError, match="no free port among 64 random ones"):
        free_port(random.Random(3), bindable=lambda p: False)


FAILED = Ended(1)  # the ranks exited on their own, not ok


@pytest.mark.parametrize(
    ("ports_taken", "restarts_used", "max_restarts", "expect"),
    [
        (0, 0, 0, "free"),
        (PORT_RETRIES - 1, 0, 0, "free"),
        (PORT_RETRIES, 0, 1, "restart"),  # always taken: now it spends a restart
        (PORT_RETRIES, 1, 1, "fail"),  # and fails once none is left, saying why
    ],
)
def test_a_taken_port_is_retried_for_free_a_bounded_number_of_times(
    ports_taken: int, restarts_used: int, max_restarts: int, expect: str
) -> None:
    standing = Standing(4, restarts_used, max_restarts, ports_taken=ports_taken)
    outcome = decide(standing, FAILED, Facts(port_taken=True))
    if expect == "free":
        assert isinstance(outcome, Requeue) and outcome.counting is Counting.nothing
        assert PORT_TAKEN_WORDS in outcome.detail and "fresh port" in outcome.detail
    elif expect == "restart":
        assert isinstance(outcome, Requeue) and outcome.counting is Counting.restart
        assert f"{PORT_TAKEN_WORDS} {PORT_RETRIES + 1} times" in outcome.detail
    else:
        assert isinstance(outcome, Fail) and f"{PORT_TAKEN_WORDS} {PORT_RETRIES + 1} times" in outcome.error
        assert "another process on this host keeps binding it" in outcome.error


# Run in a network namespace of its own (its ports and its ephemeral range are its own, so nothing else on
# the machine is disturbed): a grabber takes every ephemeral port, as busy neighbours do between our choice
# and torchrun's bind; then 50 launches each pick a port and bind it as torchrun's store does.
GRAB = """
import socket, subprocess, sys
sys.path.insert(0, sys.argv[1])
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
open("/proc/sys/net/ipv4/ip_local_port_range", "w").write("40000 40999")
held = []
while True:  # the grabber: every port the kernel hands out for bind(port 0)
    s = socket.socket()
    try:
        s.bind(("0.0.0.0", 0))
    except OSError:
        s.close()
        break
    held.append(s)
assert len(held) >= 900, len(held)
from worker.launch_command import free_port
failures = []
for _ in range(50):
    try:
        port = free_port()
        store = socket.socket()
        store.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        store.bind(("0.0.0.0", port))
        store.listen()
        held.append(store)  # this job's store keeps its port while the next jobs start
    except OSError as exc:
        failures.append(repr(exc))
print("grabbed", len(held) - 50 + len(failures), "failures", len(failures), failures[:3])
sys.exit(1 if failures else 0)
"""


@pytest.mark.slow  # a process of its own, in a network namespace of its own
def test_fifty_launches_while_another_process_holds_every_ephemeral_port_never_fail_for_a_port() -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a network namespace of the test's own needs root and unshare(1)")
    done = subprocess.run(
        ["unshare", "--net", sys.executable, "-c", GRAB, str(ROOT)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "failures 0" in done.stdout, done.stdout
