"""One death is one host loss (issue 20 item 1): a host node 0 gave up reads as dead, to the scheduler and
every node, until it heartbeats anew; a host that beat meanwhile is not given up (database only)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from sqlmodel import Session

from core import hosts
from core.db import get_engine
from core.migrate import upgrade
from core.tables import Host


def _host(url: str, name: str, beat_age_s: float) -> None:
    beat = datetime.now(timezone.utc) - timedelta(seconds=beat_age_s)
    with Session(get_engine(url)) as s:
        s.add(Host(name=name, address=name, pool="default", gpus=[], cpu_slots=2, storage_id="s", heartbeat_at=beat))
        s.commit()


def _alive(url: str) -> set[str]:
    return {h.name for h in hosts.read_all(get_engine(url), stale_after_s=30.0) if h.alive}


def test_a_given_up_host_is_dead_until_it_heartbeats_anew(api_settings, database_url) -> None:
    upgrade(database_url)
    engine = get_engine(database_url)
    _host(database_url, "silent", beat_age_s=16)  # past node 0's window (15 s), not the stale threshold (30 s)
    _host(database_url, "back", beat_age_s=1)
    assert _alive(database_url) == {"silent", "back"}  # the scheduler would place on both

    assert hosts.give_up(engine, "silent", silent_s=15)
    assert not hosts.give_up(engine, "back", silent_s=15)  # it beat meanwhile: left alone
    assert _alive(database_url) == {"back"}
    assert hosts.alive_names(engine, ["silent", "back"], 15) == {"back"}  # node 0's own peer check agrees
    silent = next(h for h in hosts.read_all(engine, 30.0) if h.name == "silent")
    age = (datetime.now(timezone.utc) - silent.heartbeat_at).total_seconds()
    assert 15 < age < 25, age  # its last beat as it was ("last seen" true), not moved back past the threshold

    hosts.beat(api_settings(database_url=database_url, host_name="silent"))  # its worker comes back
    assert _alive(database_url) == {"silent", "back"}
