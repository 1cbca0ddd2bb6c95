"""The embedded broker's adaptive poll (core/kombu_compat.py, issue 13 "idle cost"): an idle consumer
polls the table less and less often, yet a message put by another connection (a submit) is taken at
once — woken by inotify, or by stat() where there is none."""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

import pytest
from kombu import Connection, Queue

from core import kombu_compat
from tests.support.deadlines import deadline_in


@pytest.fixture
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    # Idle after 0.5 s, then polls up to 30 s apart: a message taken within a second was woken, not polled.
    monkeypatch.setattr(kombu_compat, "ACTIVE_S", 0.5)
    monkeypatch.setattr(kombu_compat, "IDLE_MAX_S", 30.0)
    kombu_compat.poll_adaptively(0.1)


def _consume(url: str, seconds: float, got: list[float], polls: list[float]) -> None:
    from kombu.transport.sqlalchemy import Channel

    queue = Queue("rz-poll-test")
    original = Channel._get

    def counted(self, name):  # type: ignore[no-untyped-def]
        polls.append(time.monotonic())
        return original(self, name)

    Channel._get = counted  # type: ignore[method-assign]
    try:
        with Connection(url) as conn:
            conn.default_channel.queue_declare(queue.name)
            with conn.Consumer(queue, callbacks=[lambda body, msg: (got.append(time.monotonic()), msg.ack())]):
                end = time.monotonic() + seconds  # a fixed window of polling, not a wait
                while time.monotonic() < end:
                    with contextlib.suppress(TimeoutError):
                        conn.drain_events(timeout=2.0)  # as Celery's loop for this transport calls it
    finally:
        Channel._get = original  # type: ignore[method-assign]


def _publish(url: str) -> float:
    with Connection(url) as conn:
        conn.default_channel.queue_declare("rz-poll-test")
        sent = time.monotonic()
        conn.Producer().publish({"job": 1}, routing_key="rz-poll-test")
        return sent


@pytest.mark.parametrize("wake", ["inotify", "stat"])
def test_idle_consumer_backs_off_and_a_put_wakes_it(
    wake: str, quick_backoff: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if wake == "stat":
        monkeypatch.setattr(kombu_compat, "_inotify", lambda folder, mask=0: None)
    url = f"sqla+sqlite:///{tmp_path / 'broker.db'}"
    got: list[float] = []
    polls: list[float] = []
    consumer = threading.Thread(target=_consume, args=(url, 9.0, got, polls), daemon=True)
    consumer.start()
    time.sleep(5.0)  # idle: after 0.5 s the polls spread out
    idle_polls = [t for t in polls if time.monotonic() - 3.0 <= t]
    assert len(idle_polls) <= 6, f"{len(idle_polls)} polls in the last 3 idle seconds (10 per second before)"
    sent = _publish(url)
    deadline = deadline_in(5)
    while not got and time.monotonic() < deadline:
        time.sleep(0.01)
    assert got, "the message was not taken"
    assert got[0] - sent < 1.0, f"taken {got[0] - sent:.2f} s after the put"
    consumer.join(15)


def test_poll_intervals_grow_from_fast_to_the_cap() -> None:
    fast = 0.1
    assert kombu_compat.idle_interval(0.0, fast) == fast
    assert kombu_compat.idle_interval(kombu_compat.ACTIVE_S - 0.01, fast) == fast
    steps = [kombu_compat.idle_interval(kombu_compat.ACTIVE_S + s, fast) for s in range(0, 60, 2)]
    assert steps == sorted(steps) and steps[-1] == kombu_compat.IDLE_MAX_S


@pytest.mark.parametrize("idle_s", [2_570.0, 3_600.0, 86_400.0 * 365])
def test_an_idle_hour_or_a_year_polls_at_the_cap_and_never_overflows(idle_s: float) -> None:
    """2 ** x of a float overflows past x = 1024 (~43 min idle at these constants): the OverflowError ended the
    worker ("Unrecoverable error") of a service left idle through the browser suite."""
    assert kombu_compat.idle_interval(idle_s, 0.1) == kombu_compat.IDLE_MAX_S
