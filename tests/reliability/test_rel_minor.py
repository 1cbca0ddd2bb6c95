"""Issue 20's minor items, each at the level where its rule lives (no service started):

- a host whose worker said goodbye (or that node 0 gave up) reads as not alive, not as "draining" for ever,
  and is placed on again from its next beat; an operator's drain is what "draining" means;
- stale drain flags of workers never restarted are swept by the host watch;
- a drained job's requeue line says an operator drained its host;
- events.jsonl deleted mid-run is noticed at the next look (worker/watch.py `record_lost`);
- a flushed Redis costs at most `redispatch_after_s` (30 s by default, was 300 s) of a placed job's time.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

from sqlmodel import Session

from core import hosts
from core.db import get_engine
from core.migrate import upgrade
from core.settings import Settings
from core.tables import Host
from worker import drain
from worker.attempt import Ended, StopReason
from worker.decide import Counting, Facts, Requeue, Standing, decide
from worker.watch import Watcher


def _host(url: str, name: str, beat_age_s: float, **kw: object) -> None:
    beat = datetime.now(timezone.utc) - timedelta(seconds=beat_age_s)
    with Session(get_engine(url)) as s:
        s.add(Host(name=name, address=name, pool="p", gpus=[], cpu_slots=2, storage_id="s", heartbeat_at=beat, **kw))
        s.commit()


def _row(url: str, name: str) -> hosts.HostRow:
    return next(h for h in hosts.read_all(get_engine(url), 30.0) if h.name == name)


def test_a_host_that_said_goodbye_is_not_alive_nor_draining_and_its_next_beat_brings_it_back(
    api_settings, sqlite_url
) -> None:
    upgrade(sqlite_url)
    _host(sqlite_url, "gone", 1, draining=True)  # its worker stopped (its last beat set the flag), never restarted
    _host(sqlite_url, "drained", 1, drain_requested=True)
    gone, drained = _row(sqlite_url, "gone"), _row(sqlite_url, "drained")
    assert not gone.alive and not gone.draining  # the CLI and the metrics say "dead", not "draining" for ever
    assert drained.alive and drained.draining  # an operator's drain: alive, nothing new placed there
    hosts.beat(api_settings(database_url=sqlite_url, host_name="gone"))  # a worker of that host is back
    assert _row(sqlite_url, "gone").alive
    hosts.beat(api_settings(database_url=sqlite_url, host_name="gone"), draining=True)  # and stops again
    assert not _row(sqlite_url, "gone").alive


def test_flags_of_workers_never_restarted_are_swept_and_live_ones_kept(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, api_token="t" * 40)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    flags = tmp_path / "drain"
    flags.mkdir()
    (flags / f"{dead.pid}-12345").touch()  # a worker killed while stopping, never restarted
    drain.request_drain(settings)  # this (live) process's own flag
    drain.sweep_dead_flags(settings)
    assert [f.name.split("-")[0] for f in flags.iterdir()] == [str(os.getpid())]
    assert drain.draining(settings)


def test_a_drained_jobs_requeue_line_says_an_operator_drained_its_host(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, api_token="t" * 40, host_name="gpu-7")
    assert drain.why(settings) == "worker shutting down (on gpu-7)"
    drain.set_host_drained(settings, True)
    why = drain.why(settings)
    assert why == "host gpu-7 drained by an operator (rankzero hosts drain)"
    outcome = decide(Standing(2), Ended(75, StopReason.drain, why), Facts())
    assert isinstance(outcome, Requeue) and outcome.counting is Counting.nothing
    assert outcome.detail == f"{why}; the job resumes from its latest checkpoint"
    assert "shutting down" not in outcome.detail


def test_events_jsonl_deleted_mid_run_is_noticed_at_the_next_look(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    events.write_text('{"seq": 1}\n')
    watcher = SimpleNamespace(tail=SimpleNamespace(offset=0), a=SimpleNamespace(run=SimpleNamespace(events=events)))
    watcher.last_step = None
    assert Watcher.record_lost(watcher) is None  # nothing read yet: the trainer has not started writing
    watcher.tail.offset, watcher.last_step = 11, 7
    assert Watcher.record_lost(watcher) is None
    events.unlink()
    lost = Watcher.record_lost(watcher)
    assert lost is not None and "events.jsonl was deleted while the job ran" in lost and "last step 7" in lost


def test_a_flushed_redis_costs_a_placed_job_at_most_half_a_minute_by_default() -> None:
    assert Settings(api_token="t" * 40).redispatch_after_s == 30.0


def test_only_an_outage_is_retried_as_one_bad_data_fails_the_supervision_saying_so() -> None:
    """A database error that would fail the same way again (here PostgreSQL's "integer out of range") must
    not be retried as "database unavailable" for ever: that hung every job of a burst on PostgreSQL."""
    from sqlalchemy.exc import DataError, IntegrityError, InterfaceError, OperationalError, ProgrammingError

    from core.db import is_outage

    def err(kind: type[Exception], invalidated: bool = False) -> Exception:
        return kind("stmt", {}, Exception("x"), connection_invalidated=invalidated)  # pyright: ignore[reportCallIssue]

    assert is_outage(err(OperationalError))  # a restart, a refused connection, a lock/statement timeout, busy
    assert is_outage(err(InterfaceError))  # a connection closed under us
    assert is_outage(err(DataError, invalidated=True))  # whatever it says, the connection was lost
    assert not is_outage(err(DataError))  # "integer out of range": the same again next time
    assert not is_outage(err(IntegrityError)) and not is_outage(err(ProgrammingError))
