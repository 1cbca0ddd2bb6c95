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
import select
import struct
import time
import weakref
from typing import Any

_installed = False


def install() -> None:
    global _installed
    if _installed:
        return
    import redis.exceptions
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
# burned ~3 % of a core. Instead the worker sleeps until a broker file (the database and its
# -wal/-journal companions) is written: any producer's message is a write. On Linux inotify wakes it
# at once (the wait costs nothing); elsewhere it stat()s the files every WATCH_S. The table itself is
# still polled every `poll_s` for ACTIVE_S after the last message or wake-up, then less and less often
# (never more than IDLE_MAX_S apart: the bound on a wake-up missed, e.g. a producer on another host of
# a shared file system). While every slot is taken (prefetch), no poll runs at all, and a slot freed by
# a finished job is noticed within `poll_s`, as before.

WATCH_S = 0.1
ACTIVE_S = 10.0
IDLE_MAX_S = 5.0
_BROKER_FILE_SUFFIXES = ("", "-wal", "-journal")
_IN_MODIFY, _IN_ATTRIB, _IN_CLOSE_WRITE, _IN_MOVED_TO, _IN_CREATE = 0x2, 0x4, 0x8, 0x80, 0x100
WRITES = _IN_MODIFY | _IN_CLOSE_WRITE | _IN_MOVED_TO | _IN_CREATE
TOUCHES = WRITES | _IN_ATTRIB  # a touch (utime) of an existing file: core/wake.py's wake-up file
_EVENT_HEAD = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then the name)


def _broker_files(transport: Any) -> list[str]:
    """The SQLite files of a kombu SQLAlchemy transport's database ([] when it is not a SQLite file)."""
    from sqlalchemy.engine import make_url

    try:
        url = make_url(transport.client.hostname)
    except Exception:
        return []
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return []
    path = os.path.abspath(url.database)
    return [path + suffix for suffix in _BROKER_FILE_SUFFIXES]


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


def _inotify(folder: str, mask: int = WRITES) -> int | None:
    """A non-blocking inotify descriptor watching `mask` events in `folder`, or None (not Linux, no inotify)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, AttributeError):
        return None
    if fd < 0:
        return None
    if libc.inotify_add_watch(fd, os.fsencode(folder), mask) < 0:
        os.close(fd)
        return None
    return fd


class BrokerWatch:
    """Tells whether the broker's files were written since `arm()`: inotify where there is one, else stat()."""

    def __init__(self, files: list[str], mask: int = WRITES) -> None:
        self.files = files
        self.names = {os.fsencode(os.path.basename(f)) for f in files}
        self.fd = _inotify(os.path.dirname(files[0]), mask) if files else None
        self._seen: tuple = ()

    def arm(self) -> None:
        """Forget earlier writes: call before polling the table, so a message put after it wakes `wait`."""
        if self.fd is not None:
            self._written()
        else:
            self._seen = _signature(self.files)

    def wait(self, seconds: float, step: float) -> bool:
        """Sleep up to `seconds`; True as soon as a broker file is written (checked every `step` without inotify)."""
        until = time.monotonic() + seconds
        while (left := until - time.monotonic()) > 0:
            if self.fd is not None:
                if select.select([self.fd], [], [], left)[0] and self._written():
                    return True
                continue
            time.sleep(min(step, left))
            if _signature(self.files) != self._seen:
                return True
        return False

    def _written(self) -> bool:
        """Drain the queued inotify events; True if one was about a broker file."""
        fd = self.fd
        if fd is None:  # closed (or never opened): nothing queued
            return False
        hit = False
        while True:
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                return hit
            at = 0
            while at + _EVENT_HEAD.size <= len(data):
                _, _, _, length = _EVENT_HEAD.unpack_from(data, at)
                name = data[at + _EVENT_HEAD.size : at + _EVENT_HEAD.size + length].rstrip(b"\0")
                hit = hit or name in self.names
                at += _EVENT_HEAD.size + length

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _slots_full(transport: Any) -> bool:
    """Whether no channel may take a message now (prefetch used up: every pool slot runs a job)."""
    consuming = [ch for ch in transport.channels if getattr(ch, "_consumers", None)]
    return bool(consuming) and not any(ch.qos.can_consume() for ch in consuming)


def idle_interval(idle_for: float, poll_s: float) -> float:
    """Seconds between polls of the table after `idle_for` seconds without a message or wake-up."""
    if idle_for < ACTIVE_S:
        return poll_s
    # The exponent is capped: a float's 2 ** x overflows past x = 1024, i.e. after ~43 min idle, and the
    # OverflowError took the whole worker down ("Unrecoverable error", seen in the browser suite's service).
    doublings = min((idle_for - ACTIVE_S) / ACTIVE_S * 4, 64.0)
    return max(poll_s, min(IDLE_MAX_S, poll_s * 2**doublings))


def _watch(transport: Any) -> BrokerWatch | None:
    watch = transport.__dict__.get("_rz_watch", False)
    if watch is False:
        files = _broker_files(transport)
        watch = transport._rz_watch = BrokerWatch(files) if files else None
        if watch is not None:
            weakref.finalize(transport, watch.close)
        transport._rz_active = time.monotonic()
    return watch


def _poll(transport: Any, watch: BrokerWatch | None) -> bool:
    """One poll of the table (armed first: a message put after it wakes the next wait); True: one was delivered."""
    from queue import Empty  # what kombu's virtual transports raise (kombu.transport.virtual.base imports it)

    if watch is not None:
        watch.arm()
    try:
        transport.cycle.get(transport._deliver, timeout=None)
    except Empty:
        return False
    transport._rz_active = time.monotonic()
    return True


def _adaptive_drain_events(self: Any, connection: Any, timeout: float | None = None) -> None:
    """kombu's virtual Transport.drain_events, waiting as the block above says instead of a fixed sleep.

    When the next poll is due is kept across calls (Celery calls this every 2 s with timeout=2):
    an idle worker does not poll at each call."""
    watch = _watch(self)
    poll_s = self.polling_interval
    start = time.monotonic()
    while True:
        now = time.monotonic()
        full = _slots_full(self)
        if watch is None or full or now >= self.__dict__.get("_rz_due", 0.0):
            if _poll(self, watch):
                self._rz_due = 0.0  # more may be waiting: the next call polls at once
                return
            now = time.monotonic()
            self._rz_due = now + (poll_s if watch is None or full else idle_interval(now - self._rz_active, poll_s))
        budget = None if timeout is None else timeout - (now - start)
        if budget is not None and budget <= 0:
            raise TimeoutError  # socket.timeout: what kombu's callers expect
        wait = self._rz_due - now if budget is None else min(self._rz_due - now, budget)
        if watch is None or full:  # nothing to watch, or no slot to take a message: sleep as kombu does
            time.sleep(max(0.0, wait))
        elif watch.wait(wait, min(WATCH_S, poll_s)):
            self._rz_due = 0.0  # a write to the broker: poll now, and fast for a while
            self._rz_active = time.monotonic()


def poll_adaptively(poll_s: float) -> None:
    """Make kombu's SQLAlchemy transport (the embedded broker) poll adaptively; `poll_s`: the fast interval."""
    from kombu.transport.sqlalchemy import Transport

    Transport.polling_interval = poll_s
    Transport.drain_events = _adaptive_drain_events


# --- the embedded broker: two processes creating the same queue row at once -----------------------
#
# kombu's SQLAlchemy Channel._get_or_create (kombu 5.x) guards "select, then insert" with a thread lock
# only: two worker processes starting together (two hosts of one pool, or `rankzero up` and a second
# worker) both miss the row and both insert it; the loser's UNIQUE violation is an IntegrityError,
# which kombu does not catch, and that worker dies at start (seen in tests/ops/test_drain.py: one of
# two workers never registered). The loser rolls back and reads the row the winner committed.


def get_or_create_queue(channel: Any, queue: str, original: Any) -> Any:
    """kombu's `_get_or_create`, with a lost insert race read back instead of raised."""
    from sqlalchemy.exc import IntegrityError

    try:
        return original(channel, queue)
    except IntegrityError:
        channel.session.rollback()
        row = channel.session.query(channel.queue_cls).filter(channel.queue_cls.name == queue).first()
        if row is None:  # not a lost race after all: what kombu would have raised
            raise
        return row


def tolerate_queue_create_race() -> None:
    """Install `get_or_create_queue` on kombu's SQLAlchemy transport (idempotent)."""
    from kombu.transport.sqlalchemy import Channel

    original = Channel.__dict__["_get_or_create"]
    if getattr(original, "_rz_race_safe", False):
        return

    def _get_or_create(self: Any, queue: str) -> Any:
        return get_or_create_queue(self, queue, original)

    _get_or_create._rz_race_safe = True  # type: ignore[attr-defined]
    _get_or_create._rz_original = original  # type: ignore[attr-defined]
    Channel._get_or_create = _get_or_create
