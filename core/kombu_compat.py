"""A workaround for kombu's Redis transport (seen with kombu 5.7.0) losing the worker on a broker outage.

When Redis goes away while a task is running with acks_late, Celery closes the broken connection;
kombu's channel close then tries to requeue the unacked message through a new connection pool built
from `connection.client`, which is already None, and raises AttributeError. That is not one of the
transport's connection errors, so Celery calls it "Unrecoverable" and the worker exits once its
running jobs end: it never reconnects and takes no new job. (The same happens to the task's ack.)

Raising the transport's own ConnectionError instead lets both paths do what they do for any broker
error: the close is ignored, the ack is logged as not done, and the consumer reconnects. The unacked
message stays in Redis's unacked set (visibility_timeout brings it back; the job claim makes that harmless).
"""

from __future__ import annotations

import os
import time
from typing import Any

_installed = False


def install() -> None:
    global _installed
    if _installed:
        return
    import redis
    from kombu.transport import redis as kombu_redis

    original = kombu_redis.Channel._connparams

    def _connparams(self: Any, asynchronous: bool = False) -> Any:
        if self.connection is None or self.connection.client is None:
            raise redis.exceptions.ConnectionError("the broker connection is closed")
        return original(self, asynchronous=asynchronous)

    kombu_redis.Channel._connparams = _connparams
    _installed = True


# --- the embedded broker (kombu's SQLAlchemy transport on SQLite): poll adaptively ---------------
#
# kombu polls the message table every `polling_interval` seconds, each poll a few SQL statements in a
# BEGIN IMMEDIATE transaction: at 0.1 s (what keeps submit → start short) an idle `rankzero up`
# burned ~3 % of a core. Instead the worker waits by stat()ing the broker's files (the database and
# its -wal/-journal companions): any producer's message is a write, and a write changes them, so a
# submit wakes the worker within WATCH_S (a stat costs microseconds, a poll milliseconds). The table
# itself is still polled every `poll_s` for ACTIVE_S after the last message or wake-up, then less and
# less often (never more than IDLE_MAX_S apart: the bound on a wake-up missed, e.g. two writes within
# one tick of the file system's clock). While every slot is taken (prefetch), no poll runs at all,
# and a slot freed by a finished job is noticed within `poll_s`, as before.

WATCH_S = 0.05
ACTIVE_S = 10.0
IDLE_MAX_S = 2.0
_BROKER_FILE_SUFFIXES = ("", "-wal", "-journal")


def _broker_files(transport: Any) -> list[str]:
    """The SQLite files of a kombu SQLAlchemy transport's database ([] when it is not a SQLite file)."""
    from sqlalchemy.engine import make_url

    try:
        url = make_url(transport.client.hostname)
    except Exception:
        return []
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return []
    return [url.database + suffix for suffix in _BROKER_FILE_SUFFIXES]


def _signature(files: list[str]) -> tuple[tuple[int, int, int], ...]:
    out = []
    for path in files:
        try:
            st = os.stat(path)
        except OSError:
            out.append((0, 0, 0))
        else:
            out.append((st.st_ino, st.st_mtime_ns, st.st_size))
    return tuple(out)


def _slots_full(transport: Any) -> bool:
    """Whether no channel may take a message now (prefetch used up: every pool slot runs a job)."""
    consuming = [ch for ch in transport.channels if getattr(ch, "_consumers", None)]
    return bool(consuming) and not any(ch.qos.can_consume() for ch in consuming)


def idle_interval(idle_for: float, poll_s: float) -> float:
    """Seconds between polls of the table after `idle_for` seconds without a message or wake-up."""
    if idle_for < ACTIVE_S:
        return poll_s
    return max(poll_s, min(IDLE_MAX_S, poll_s * 2 ** ((idle_for - ACTIVE_S) / ACTIVE_S * 4)))


def _wait(transport: Any, seen: tuple, files: list[str], budget: float | None) -> None:
    """Sleep until the next poll is due, a broker file changes (a wake-up) or `budget` runs out."""
    now = time.monotonic()
    full = _slots_full(transport)
    poll_s = transport.polling_interval
    interval = poll_s if full else idle_interval(now - transport._rz_active, poll_s)
    until = now + (interval if budget is None else min(interval, budget))
    step = min(WATCH_S, poll_s)
    while (left := until - time.monotonic()) > 0:
        time.sleep(min(step, left))
        if not full and _signature(files) != seen:
            transport._rz_active = time.monotonic()
            return


def _adaptive_drain_events(self: Any, connection: Any, timeout: float | None = None) -> None:
    """kombu's virtual Transport.drain_events, waiting as the block above says instead of a fixed sleep."""
    from kombu.transport.virtual.base import Empty

    files = self.__dict__.get("_rz_files")
    if files is None:
        files = self._rz_files = _broker_files(self)
        self._rz_active = time.monotonic()
    start = time.monotonic()
    while True:
        seen = _signature(files)  # before the poll: a message put after it changes what the wait sees
        try:
            self.cycle.get(self._deliver, timeout=timeout)
        except Empty:
            pass
        else:
            self._rz_active = time.monotonic()
            return
        budget = None if timeout is None else timeout - (time.monotonic() - start)
        if budget is not None and budget <= 0:
            raise TimeoutError  # socket.timeout: what kombu's callers expect
        if files:
            _wait(self, seen, files, budget)
        else:  # not a SQLite file: nothing to watch, poll at the fixed interval as kombu does
            time.sleep(self.polling_interval if budget is None else min(self.polling_interval, budget))


def poll_adaptively(poll_s: float) -> None:
    """Make kombu's SQLAlchemy transport (the embedded broker) poll adaptively; `poll_s`: the fast interval."""
    from kombu.transport.sqlalchemy import Transport

    Transport.polling_interval = poll_s
    Transport.drain_events = _adaptive_drain_events
