"""A script job's console as metrics: rank 0's stdout and stderr of one attempt, read as they grow, parsed
by worker/console_metrics.py and written through the Ingestor like TensorBoard's scalars.

Who wins a name: the SDK's `metric` events and TensorBoard's scalars. A console point waits HOLD_S
before it is written, so the SDK's event for the same step (its writer lingers 0.25 s) is read first
and claims the name; from then on the console's points of that name are dropped. Progress: the
console's step counter (and a tqdm / Keras total) becomes the job's `step` / `total_steps` while the
script reports no `progress` event of its own; its newest `loss` (`train loss`, `train/loss`) the job's
latest loss while no `train/loss` comes from elsewhere.

Never a line lost: a tick reads at most READ_BYTES (1 MiB) per stream, so a fast printer's lines wait for the
next ticks, and at the attempt's end every byte left is read before the last write (within MAX_JOB_BYTES per
stream per attempt: past it the summary says `capped`, and the job page says so). Lines cut at
console_metrics.MAX_LINE_CHARS, at most console_metrics.MAX_SERIES names per job.

`<run>/console_series.json` keeps the names written (the chart's "from the console") and the reader's summary
(core/console_reader/gate.py: what was recognised, from which line, or a suggested pattern; the lines read).
A pattern added to the running job (POST /api/jobs/{id}/console-patterns puts it in the spec) is noticed
within PATTERNS_EVERY_S and replayed over the console read so far, then applied to what follows. Idempotent
across a restarted worker like TensorBoard's: the Ingestor keeps a point only past the highest step it holds
for its name.
"""

from __future__ import annotations

import codecs
import json
import logging
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from sqlalchemy.exc import DBAPIError

from core import jobs, run_files
from core.console_reader.job import replay
from trainer.event_types import EventType
from trainer.run_dir import RunDir
from trainer.spec import JobSpec
from worker.console_metrics import ConsoleMetrics, Point, UserPattern, compile_patterns
from worker.ingest import Ingestor
from worker.ingest_handlers import TimedMetric

log = logging.getLogger("rankzero.worker")
HOLD_S = 1.0
READ_BYTES = 1 << 20  # per stream per tick (a chatty job's backlog is read over the next ticks, and at its end)
MAX_JOB_BYTES = 1 << 30  # per stream per attempt: past it the console is no longer read (the summary says so)
PATTERNS_EVERY_S = 3.0  # how often a running job's spec is read for patterns added to it
SUMMARY_EVERY_S = 5.0
STREAMS = ("stdout", "stderr")
LOSS_NAMES = ("train/loss", "train loss", "train_loss", "loss")


def _console_file(run: RunDir) -> dict[str, Any]:
    try:
        found = json.loads(run_files.read_text(run.console_series, run.root, max_bytes=4 << 20))
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def console_series(run: RunDir) -> list[str]:
    """The names a job's console gave series (empty when none, or the file is unreadable)."""
    names = _console_file(run).get("names", [])
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []


class _Stream:
    """One log file read from where the last call stopped, decoded without splitting a character."""

    def __init__(self, root: Path) -> None:
        self.root = root  # the run dir: no link below it is followed
        self.path: Path | None = None
        self.offset = 0
        self.capped = False  # MAX_JOB_BYTES read: the rest is not
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def read(self, path: Path | None) -> str:
        if path is None:
            return ""
        if path != self.path:  # first found
            self.path, self.offset = path, 0
            self.decoder.reset()
        want = min(READ_BYTES, MAX_JOB_BYTES - self.offset)
        if want <= 0:
            self.capped = self.capped or _size(path, self.root) > self.offset
            return ""
        try:
            with run_files.open_file(path, "rb", self.root) as fh:
                fh.seek(self.offset)
                chunk = fh.read(want)
        except OSError:
            return ""
        self.offset += len(chunk)
        return self.decoder.decode(chunk)


def _size(path: Path, root: Path) -> int:
    try:
        with run_files.open_file(path, "rb", root) as fh:
            return fh.seek(0, 2)
    except OSError:
        return 0


def read_stored(run: RunDir, attempt: int, stream: str, upto: int | None = None) -> Iterator[str]:
    """Rank 0's `stream` log of `attempt`, decoded, in READ_BYTES pieces (at most `upto` or MAX_JOB_BYTES)."""
    path = run.rank_logs(stream, attempt).get(0)
    reader = _Stream(run.root)
    limit = min(MAX_JOB_BYTES, upto if upto is not None else MAX_JOB_BYTES)
    while reader.offset < limit and (text := reader.read(path)):
        yield text


class ConsoleFeed:
    def __init__(self, run: RunDir, attempt: int, spec: JobSpec) -> None:
        self.run = run
        self.attempt = attempt
        settings = spec.console_metrics
        patterns = compile_patterns(p.model_dump() for p in settings.patterns) if settings else []
        self.parser = ConsoleMetrics(defaults=settings.defaults if settings else True, patterns=patterns)
        self.enabled = spec.is_script and (self.parser.defaults or bool(patterns))
        self.streams = {s: _Stream(run.root) for s in STREAMS}
        self.held: list[tuple[float, Point]] = []  # (read at, point), oldest first
        self.claimed: set[str] = set()  # names the SDK or TensorBoard gave
        self.sdk_progress = False
        self.written_progress: dict[str, Any] = {}
        self.series: set[str] = set(console_series(run))
        self.is_script = spec.is_script
        self.pattern_count = len(patterns)
        self.patterns_read_at = time.monotonic()
        self.summary_at = 0.0
        self.summary_written: dict[str, Any] | None = None

    def read(self, drain: bool = False) -> None:
        """Parse what rank 0's logs grew by since the last call (`drain`: all of it, the attempt has ended)."""
        if not self.enabled:
            return
        now = time.monotonic()
        for stream, reader in self.streams.items():
            path = reader.path or self.run.rank_logs(stream, self.attempt).get(0)  # globbed until found
            while text := reader.read(path):
                self.held.extend((now, p) for p in self.parser.feed(text, stream))
                if not drain:
                    break

    def _notice_patterns(self, ingestor: Ingestor, final: bool) -> None:
        """Patterns added to the job's spec since it started: replayed over the console read so far, then
        applied to what follows (the API replays them itself once the job has ended)."""
        now = time.monotonic()
        if not self.is_script or (not final and now - self.patterns_read_at < PATTERNS_EVERY_S):
            return
        self.patterns_read_at = now
        try:
            row = jobs.get_job(ingestor.engine, ingestor.job_id)
        except DBAPIError:  # the database is down: try again next time
            return
        spec = (row.spec or {}) if row is not None else {}
        listed = (spec.get("console_metrics") or {}).get("patterns") or []
        if len(listed) <= self.pattern_count:
            return
        try:
            added = compile_patterns(listed[self.pattern_count :])
        except ValueError:
            return
        self.pattern_count = len(listed)
        self.enabled = True
        self.held.extend((0.0, p) for p in self._replay(added))
        self.parser.patterns.extend(added)

    def _replay(self, patterns: list[UserPattern]) -> list[Point]:
        pieces = [
            (stream, text)
            for stream, reader in self.streams.items()
            for text in read_stored(self.run, self.attempt, stream, upto=reader.offset)
        ]
        return replay(pieces, patterns, ended=False)

    def claim(self, events: Iterable[dict[str, Any]], scalars: Iterable[TimedMetric]) -> None:
        """Note the names (and progress) other sources give, before their batch is written."""
        if not self.enabled:
            return  # the built-in trainer's bursts of events pay nothing here
        for ev in events:
            kind = ev.get("type")
            if kind == EventType.metric and isinstance(ev.get("name"), str):
                self.claimed.add(ev["name"])
            elif kind == EventType.progress:
                self.sdk_progress = True
        self.claimed.update(m["name"] for m in scalars if not m["name"].startswith("sys/"))

    def write(self, ingestor: Ingestor, final: bool = False) -> int:
        """Write the points held long enough (all of them when `final`); return how many were new."""
        self._notice_patterns(ingestor, final)
        if not self.enabled:
            return 0
        if final:
            self.read(drain=True)  # every line left, however fast it was printed
            self.held.extend((0.0, p) for p in self.parser.flush())
        self._note_summary(final)
        cutoff = float("inf") if final else time.monotonic() - HOLD_S
        ready = [p for at, p in self.held if at <= cutoff]
        self.held = [(at, p) for at, p in self.held if at > cutoff]
        points = [p for p in ready if p.name not in self.claimed]
        progress = self._progress(points)
        if not points and not progress:
            return 0
        now = time.time()
        metrics: list[TimedMetric] = [
            {"type": EventType.metric.value, "time": now, "step": p.step, "name": p.name, "value": p.value}
            for p in points
        ]
        new = ingestor.ingest_metrics(metrics, progress=progress, steps_from_metrics=False)
        self.written_progress.update(progress)
        self._note_series({p.name for p in points})
        return new

    def _progress(self, points: list[Point]) -> dict[str, Any]:
        """The job row's columns the console drives now (only what changed)."""
        want: dict[str, Any] = {}
        if not self.sdk_progress and self.parser.step is not None:
            want["step"] = self.parser.step
            if self.parser.total is not None and self.parser.total >= self.parser.step:
                want["total_steps"] = self.parser.total
        if "train/loss" not in self.claimed:
            for p in reversed(points):
                if p.name in LOSS_NAMES:
                    want["latest_loss"] = p.value
                    break
        return {k: v for k, v in want.items() if self.written_progress.get(k) != v}

    def _note_series(self, names: set[str]) -> None:
        if names <= self.series:
            return
        self.series |= names
        _write_console_file(self.run, self.series, self.summary_written)

    def summary(self) -> dict[str, Any]:
        """What the reader made of the console so far (core/console_reader/gate.py), and whether a cap hit."""
        capped = [s for s, r in self.streams.items() if r.capped]
        return {**self.parser.summary(), "capped_streams": capped, "cap_bytes": MAX_JOB_BYTES if capped else None}

    def _note_summary(self, final: bool) -> None:
        now = time.monotonic()
        if not final and now - self.summary_at < SUMMARY_EVERY_S:
            return
        self.summary_at = now
        summary = self.summary()
        if summary != self.summary_written:
            self.summary_written = summary
            _write_console_file(self.run, self.series, summary)


def _write_console_file(run: RunDir, series: set[str], summary: dict[str, Any] | None) -> None:
    body: dict[str, Any] = {"names": sorted(series)}
    if summary is not None:  # what the reader made of the console (noted every SUMMARY_EVERY_S)
        body["summary"] = summary
    target = run.console_series
    try:  # never through a link the job made (console_series.json is in its run dir): core/run_files.py
        run_files.write_atomic(target, json.dumps(body), run.root)
    except OSError:
        log.warning("%s: could not note the console's series", target)
