"""Two processes declaring one queue on the embedded broker at once (core/kombu_compat.py
`tolerate_queue_create_race`): kombu selects, misses, and inserts; the insert that loses the race is a
UNIQUE violation. Without the fix the second worker of a pool died at start (tests/ops/test_drain.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kombu import Connection
from sqlalchemy.exc import IntegrityError

from core import kombu_compat


def _lose_the_race(channel: Any, other: Connection, queue: str) -> None:
    """Make `channel`'s next selects of the queue row miss, as if `other` committed it just after them."""
    session = channel.session
    real_query = session.query
    misses = [2]  # kombu's select before its lock and the one inside it

    class Missing:
        def filter(self, *a: Any) -> Missing:
            return self

        def first(self) -> None:
            return None

    def query(*args: Any, **kw: Any) -> Any:
        if args and args[0] is channel.queue_cls and misses[0] > 0:
            misses[0] -= 1
            if misses[0] == 0:
                other.default_channel.queue_declare(queue)  # the other process commits the row now
            return Missing()
        return real_query(*args, **kw)

    session.query = query


@pytest.mark.parametrize("fixed", [False, True])
def test_a_lost_queue_insert_race_reads_the_winners_row(tmp_path: Path, fixed: bool, monkeypatch) -> None:
    from kombu.transport.sqlalchemy import Channel

    current = Channel.__dict__["_get_or_create"]
    kombus = getattr(current, "_rz_original", current)  # kombu's own, even where a worker of this process fixed it
    monkeypatch.setattr(Channel, "_get_or_create", kombus)  # undone after the test
    if fixed:
        kombu_compat.tolerate_queue_create_race()
    url = f"sqla+sqlite:///{tmp_path / 'broker.db'}"
    with Connection(url) as mine, Connection(url) as other:
        mine.default_channel.queue_declare("warmup")  # tables exist before the race
        channel = mine.default_channel
        _lose_the_race(channel, other, "rankzero")
        if not fixed:
            with pytest.raises(IntegrityError):
                channel._get_or_create("rankzero")
            return
        row = channel._get_or_create("rankzero")
        assert row.name == "rankzero"
        rows = channel.session.query(channel.queue_cls).filter(channel.queue_cls.name == "rankzero").all()
        assert len(rows) == 1
        channel._put("rankzero", {"body": "after the race"})  # the channel still works
        assert channel._get("rankzero") == {"body": "after the race"}
