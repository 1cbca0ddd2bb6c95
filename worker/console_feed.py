"""A script job's console as metrics: rank 0's stdout and stderr of one attempt, read as they grow, parsed
by worker/console_metrics.py and written through the Ingestor like TensorBoard's scalars.

Who wins a name: the SDK's `metric` events and TensorBoard's scalars. A console point waits HOLD_S
before it is written, so the SDK's event for the same step (its writer lingers 0.25 s) is read first
and claims the name; from then on the console's points of that name are dropped. Progress: the
console's step counter (and a tqdm / Keras total) becomes the job's `step` / `total_steps` while the
script reports no `progress` event of its own; its newest `loss` (`train loss`, `train/loss`) the job's
latest loss while no `train/loss` comes from elsewhere.

Bounded: at most READ_BYTES (256 KiB) per stream per call, lines cut at console_metrics.MAX_LINE_CHARS, at most
console_metrics.MAX_SERIES names per job. The names written are kept in `<run>/console_series.json`
(the chart's "from the console"). Idempotent across a restarted worker like TensorBoard's: the
Ingestor keeps a point only past the highest step it holds for its name.
"""

from __future__ import annotations

import codecs
import json
import logging
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from core import run_files
from trainer.event_types import EventType
from trainer.run_dir import RunDir
from trainer.spec import JobSpec
from worker.console_metrics import ConsoleMetrics, Point, compile_patterns
from worker.ingest import Ingestor
from worker.ingest_handlers import TimedMetric

log = logging.getLogger("rankzero.worker")
HOLD_S = 1.0
READ_BYTES = 256 << 10  # per stream per tick: parsing a full read takes well under a second (~13k lines/s)
STREAMS = ("stdout", "stderr")
LOSS_NAMES = ("train/loss", "train loss", "train_loss", "loss")


def console_series(run: RunDir) -> list[str]:
    """The names a job's console gave series (empty when none, or the file is unreadable)."""
    try:
        names = json.loads(run_files.read_text(run.console_series, run.root, max_bytes=4 << 20)).get("names", [])
    except (OSError, ValueError, AttributeError):
        return []
    return [n for n in names if isinstance(n, str)]


class _Stream:
    """One log file read from where the last call stopped, decoded without splitting a character."""

    def __init__(self, root: Path) -> None:
        self.root = root  # the run dir: no link below it is followed
        self.path: Path | None = None
        self.offset = 0
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def read(self, path: Path | None) -> str:
        if path is None:
            return ""
        if path != self.path:  # first found
            self.path, self.offset = path, 0
            self.decoder.reset()
        try:
            with run_files.open_file(path, "rb", self.root) as fh:
                fh.seek(self.offset)
                chunk = fh.read(READ_BYTES)
        except OSError:
            return ""
        self.offset += len(chunk)
        return self.decoder.decode(chunk)


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

    def read(self) -> None:
        """Parse what rank 0's logs grew by since the last call."""
        if not self.enabled:
            return
        now = time.monotonic()
        for stream, reader in self.streams.items():
            path = reader.path or self.run.rank_logs(stream, self.attempt).get(0)  # globbed until found
            text = reader.read(path)
            if text:
                self.held.extend((now, p) for p in self.parser.feed(text, stream))

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
        if not self.enabled:
            return 0
        if final:
            self.held.extend((0.0, p) for p in self.parser.flush())
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
        target = self.run.console_series
        try:  # never through a link the job made (console_series.json is in its run dir): core/run_files.py
            run_files.write_atomic(target, json.dumps({"names": sorted(self.series)}), self.run.root)
        except OSError:
            log.warning("%s: could not note the console's series", target)
