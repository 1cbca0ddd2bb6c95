"""Node 0's look at a running attempt: read what the ranks wrote, beat the job's heart, and say what was
seen as a value (`Seen`); worker/stop_reason.py decides from it whether to stop the ranks.

The watcher keeps the loop's state: events read but not yet written (the database may be down),
whether this attempt's `started` event was seen (it arms the stall watchdog), and the times of the
last sign of life, heartbeat, peer check and rollup fold. TensorBoard scalars (worker/tensorboard.py)
and the job's `sys/…` samples wait in `pending_tb`; a script job's log output counts as a sign of life
like an event.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError
from sqlmodel import Session

from core import hosts, jobs
from core.console_log import MarkWriter
from core.db import is_outage
from core.settings import Settings
from core.tables import JobStatus
from trainer.event_types import EventType
from worker import drain, script_jobs
from worker.attempt import Attempt, Seen
from worker.console_feed import ConsoleFeed
from worker.ingest import Ingestor
from worker.ingest_events import EventTail
from worker.ingest_handlers import SeriesCaps, TimedMetric
from worker.quota import Quota, QuotaWatch
from worker.rank_watch import RankWatch
from worker.resources import ResourceWatch
from worker.tensorboard import TensorBoardTail

log = logging.getLogger("rankzero.worker")
S = JobStatus
# A chart read folds what is left, so this is an optimisation: every 2 s it was 6 % of the worker's samples (issue 29).
FOLD_EVERY_S = 5.0
# TensorBoard/sys scalars one tick writes: the next heartbeat waits for at most this many (the rest next tick).
TICK_POINTS = 20_000


def fold_rollups(engine: Engine, job_id: int) -> None:
    """Fold new points into the API's min/max rollups now, so a chart read never pays for it."""
    try:
        from core import metric_rollup

        with Session(engine) as s:
            metric_rollup.refresh(s, job_id)
            s.commit()
    except Exception:  # a read folds whatever is left; never fail a job over a summary
        log.exception("job %s: folding metric rollups failed", job_id)


def peer_window_s(settings: Settings) -> float:
    """How long another node's host may go without a heartbeat before node 0 gives it up: a few of its
    beats (worker/lifecycle.py beats every heartbeat_s), much less than the job-level stale threshold."""
    return max(3.0 * settings.heartbeat_s, 3.0)


def silent_peer(a: Attempt) -> str | None:
    """The first of the other nodes' hosts whose heartbeat stopped (None: all alive)."""
    alive = hosts.alive_names(a.engine, list(a.layout.peers), peer_window_s(a.settings))
    return next((h for h in a.layout.peers if h not in alive), None)


class Watcher:
    def __init__(self, a: Attempt) -> None:
        self.a = a
        self.tail = EventTail(a.run.events)
        caps = SeriesCaps(a.settings.job_max_series, a.settings.job_max_points_per_series)  # issue 19 item 4
        self.ingestor = Ingestor(a.engine, a.job_id, a.run.root, attempt=a.number, caps=caps)
        self.pending: list[dict[str, Any]] = []
        self.tensorboard = TensorBoardTail(a.run.tensorboard)
        self.pending_tb: list[TimedMetric] = []
        self.console = ConsoleFeed(a.run, a.number, a.spec)  # a script's printed metrics and step counter
        self.output_bytes = 0
        self.launched_at = time.time()
        self.started = False
        self.last_beat = self.last_event = self.last_fold = time.monotonic()
        self.heartbeat_mtime = 0.0  # of the ranks' heartbeat file (trainer/train.py `_beat`)
        self._notice_heartbeat()  # an earlier attempt's last beat is not this one's life
        self.started, self.last_event = False, time.monotonic()
        self.last_step: int | None = None
        self.finished_at: float | None = None  # monotonic: when this attempt's `finished` was read (built-in trainer)
        self.status: JobStatus | None = S.running
        self.attempt = a.number
        self.preempt_for: int | None = None  # the job the scheduler stops us for
        self.resources = ResourceWatch(
            a.mark,
            memory_limit_mb=a.spec.memory_limit_mb,
            gpus=list(a.layout.gpus) or None,
            interval_s=a.settings.heartbeat_s,
            settings=a.settings,
        )
        # The merged console's time marks beside every rank log of this attempt (core/console_log.py).
        self.log_marks = MarkWriter(a.run.attempt_logs(a.number))
        self.over_limit: str | None = None
        self.lost_peer: str | None = None  # another node's host that went silent
        self.last_peer_check = time.monotonic()
        row = jobs.get_job(a.engine, a.job_id)  # max_runtime_s counts from the job's first start
        started_at = row.started_at if row is not None else None
        self.quota = QuotaWatch(Quota.of(a.spec, a.settings), a.run.root, started_at, a.settings.heartbeat_s)
        self.ranks = RankWatch(a)  # every rank's progress onto the job row (issue 38)

    # --- reading what the ranks wrote -------------------------------------------------------------

    def read_events(self) -> None:
        events = self.tail.read()
        if events:
            self.pending.extend(events)
            self.last_event = time.monotonic()
            self.started = self.started or any(self._is_this_start(e) for e in events)
            if self.finished_at is None and not self.a.spec.is_script and any(self._is_this_end(e) for e in events):
                self.finished_at = time.monotonic()
            steps = [e["step"] for e in events if isinstance(e.get("step"), int)]
            self.last_step = max(steps) if steps else self.last_step
        self._notice_heartbeat()
        # A large event folder is read a bit a tick while the ranks run; all of what is left at their end.
        if len(self.pending_tb) < TICK_POINTS or self.a.proc.poll() is not None:
            self.pending_tb.extend(self.tensorboard.read())
        sample = self.resources.poll(time.monotonic(), self.last_step or 0)
        if sample is not None:
            self.pending_tb.extend(sample.events())  # sys/... series, beside the training ones
            self.over_limit = sample.over_limit
        if self.a.spec.is_script:
            self._notice_output()
            self.console.read()
        self.log_marks.note(time.time(), final=self.a.proc.poll() is not None)

    def _notice_output(self) -> None:
        """A script that writes no events is alive while its logs grow (its first output arms the watchdog)."""
        size = script_jobs.output_size(self.a.run, self.a.number)
        if size != self.output_bytes:
            self.output_bytes = size
            self.last_event = time.monotonic()
            self.started = True

    def _notice_heartbeat(self) -> None:
        """Rank 0 touches the heartbeat file every step (at most once a second): life, whatever log_every is."""
        try:
            mtime = self.a.run.heartbeat.stat().st_mtime
        except OSError:
            return
        if mtime > self.heartbeat_mtime:
            self.heartbeat_mtime = mtime
            self.last_event = time.monotonic()
            self.started = True

    def _is_this_start(self, ev: dict[str, Any]) -> bool:
        """This attempt's `started` (an earlier attempt's is older than its launch)."""
        return ev.get("type") == EventType.started and float(ev.get("time", 0)) >= self.launched_at - 1

    def _is_this_end(self, ev: dict[str, Any]) -> bool:
        """This attempt's `finished`: the final checkpoint and every event are on disk."""
        return ev.get("type") == EventType.finished and float(ev.get("time", 0)) >= self.launched_at - 1

    # --- the database -----------------------------------------------------------------------------

    def due(self) -> float:
        """When (monotonic) the next heartbeat or resource sample is due: the supervisor wakes for it."""
        return min(self.last_beat + self.a.settings.heartbeat_s, self.resources.due())

    def look(self, now: float, read_row: bool = True) -> Seen:
        """Read the row (`read_row`; else the row last read stands), beat the heart, write pending events;
        return what was seen. The beat comes before the ingest, and a tick writes at most TICK_POINTS
        scalars, so a large TensorBoard folder never holds the job's heartbeat back (issue 20 item 6). A
        database that is down reads as the row last seen: the ranks carry on and the events wait in `pending`."""
        a = self.a
        try:
            if read_row:
                self.status, self.attempt, self.preempt_for = jobs.live_view(a.engine, a.job_id)
            if self.status is None or self.attempt == a.number:
                if now - self.last_beat >= a.settings.heartbeat_s:
                    jobs.touch_live(a.engine, a.job_id, attempt=a.number)
                    self.last_beat = now
                if a.layout.peers and now - self.last_peer_check >= a.settings.heartbeat_s:
                    self.lost_peer = silent_peer(a)
                    self.last_peer_check = now
            self._write_pending(now, limit=TICK_POINTS)
            self.ranks.poll(now)
        except DBAPIError as exc:
            if not is_outage(exc):  # bad data or a bug, not an outage: supervision fails saying so
                raise
            log.warning("job %s: database unavailable, retrying (%s)", a.job_id, type(exc).__name__)
            self.status, self.attempt = S.running, a.number
        return Seen(
            status=self.status,
            attempt=self.attempt,
            preempt_for=self.preempt_for,
            draining=drain.draining(a.settings) or drain.host_drained(a.settings),
            over_limit=self.over_limit,
            lost_peer=self.lost_peer,
            started=self.started,
            quiet_s=now - self.last_event,
            last_step=self.last_step,
            broke_limit=self.quota.check(now, self.tail.overlong_lines) or self.record_lost(),
            finished_s=now - self.finished_at if self.finished_at is not None else None,
        )

    def record_lost(self) -> str | None:
        """Why the run's record can no longer be whole: events.jsonl deleted after the ranks wrote to it (they
        go on writing into the deleted file). Noticed at the next look, not at the run's end (issue 20)."""
        if self.tail.offset == 0 or self.a.run.events.exists():
            return None
        return (
            f"events.jsonl was deleted while the job ran (after {self.tail.offset} bytes; "
            f"last step {self.last_step}): the run's record cannot be completed"
        )

    def write_pending(self, limit: int | None = None) -> int:
        """Write what was read (events, then TensorBoard scalars, then the console's); return the new metric
        points. `limit`: at most that many TensorBoard/sys scalars (the rest wait for the next tick)."""
        self.console.claim(self.pending, self.pending_tb)  # the SDK and TensorBoard win a name over the console
        new = self.ingestor.ingest(self.pending) if self.pending else 0
        self.pending = []
        if self.pending_tb:
            batch = self.pending_tb if limit is None else self.pending_tb[:limit]
            new += self.ingestor.ingest_metrics(batch)
            self.pending_tb = self.pending_tb[len(batch) :]
        new += self.console.write(self.ingestor, final=self.a.proc.poll() is not None)
        return new

    def _write_pending(self, now: float, limit: int | None = None) -> None:
        new = self.write_pending(limit)
        if new and now - self.last_fold > FOLD_EVERY_S:
            fold_rollups(self.a.engine, self.a.job_id)
            self.last_fold = now
