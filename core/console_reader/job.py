"""One job's console → (step, name, value) points and its step counter: what a script job prints, read by
the worker as it runs (worker/console_feed.py) and replayed by the API when a pattern is added later.

Pure (no I/O): `ConsoleMetrics.feed(text)` takes what the logs grew by and returns the points its complete
lines hold; `step` / `total` are the step counter that drives the job's progress when the script reports
none through the SDK. Carriage-return updates (tqdm redraws its bar with `\\r`) are lines of their own; ANSI
colours are dropped; a line is cut at MAX_LINE_CHARS before anything reads it.

Two readers, both linear in the line: the general reader (core/console_reader: any `key value` fields, the
step learnt per job, a series only for a key that repeats), and the user's patterns (spec
`console_metrics.patterns`, RE2: named groups `value` and `key` (or a fixed `name`), optionally `step`),
whose points are never held back. A point with no step of its own takes the counter's (past the name's last
step, so none is lost); before any counter, a name's own count of points (0, 1, 2, …).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from core.console_reader.reader import ConsoleReader
from trainer.spec import compile_console_regex

MAX_LINE_CHARS = 4096  # a longer line is cut here (a progress bar or a dict line is far shorter)
MAX_NAME_CHARS = 100
MAX_SERIES = 64  # distinct console series per job: names past it are dropped (and counted)
MAX_STEP = 10**12

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_BREAKS = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class Point:
    step: int
    name: str
    value: float


@dataclass(frozen=True)
class UserPattern:
    """One of the spec's `console_metrics.patterns`, compiled (RE2)."""

    regex: Any  # re2's compiled pattern
    name: str | None


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _int_or_none(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        n = int(text)
    except ValueError:
        return None
    return n if 0 <= n <= MAX_STEP else None


def parse_user(line: str, patterns: Iterable[UserPattern]) -> tuple[list[tuple[str, float, int | None]], int | None]:
    """What the user's patterns read in one line (every pattern, every match): (name, value, step) and a step."""
    values: list[tuple[str, float, int | None]] = []
    step: int | None = None
    for p in patterns:
        for m in p.regex.finditer(line):
            groups = m.groupdict()
            at = _int_or_none(groups.get("step"))
            step = at if at is not None else step
            name = p.name or groups.get("key")
            value = _number(groups.get("value") or "")
            if name and value is not None:
                values.append((" ".join(name.split())[:MAX_NAME_CHARS], value, at))
    return values, step


def compile_patterns(patterns: Iterable[dict[str, Any]]) -> list[UserPattern]:
    """The spec's patterns (validated at submit: trainer/spec.py ConsolePattern) compiled with RE2."""
    return [UserPattern(compile_console_regex(p["regex"]), p.get("name")) for p in patterns]


def split_lines(text: str) -> list[str]:
    """Lines of `text`, `\\r` redraws included, colours dropped, each cut at MAX_LINE_CHARS."""
    text = _ANSI.sub("", text)
    return [line[:MAX_LINE_CHARS] for line in _BREAKS.split(text) if line.strip()]


@dataclass
class ConsoleMetrics:
    """The parser's state for one job: the reader's, the step counter, each name's count, the partial line."""

    defaults: bool = True
    patterns: list[UserPattern] = field(default_factory=list)
    step: int | None = None  # the step counter (drives progress); None until a line names a step
    total: int | None = None
    names: dict[str, int] = field(default_factory=dict)  # name → points so far (the step before any counter)
    last_step: dict[str, int] = field(default_factory=dict)  # name → its newest point's step
    dropped_names: int = 0
    reader: ConsoleReader = field(default_factory=ConsoleReader)
    only_patterns: bool = False  # a replay: the reader learns the steps, only the patterns' points are kept
    pattern_names: list[str] = field(default_factory=list)  # series the user's patterns gave (bounded by names)
    _partial: dict[str, str] = field(default_factory=dict)  # stream → its line still being written

    def feed(self, text: str, stream: str = "") -> list[Point]:
        """Points in the complete lines of `text`, the next part of `stream` (stdout and stderr share the
        step counter; each keeps its own partial last line, which waits for the next call)."""
        data = self._partial.get(stream, "") + text
        cut = max(data.rfind("\n"), data.rfind("\r"))
        complete, self._partial[stream] = data[: cut + 1], data[cut + 1 :][-MAX_LINE_CHARS:]
        points: list[Point] = []
        for line in split_lines(complete):
            points.extend(self.line(line))
        return points

    def flush(self) -> list[Point]:
        """The partial last lines too (the ranks have exited: they will never end)."""
        rest, self._partial = list(self._partial.values()), {}
        return [p for text in rest for line in split_lines(text) for p in self.line(line)]

    def line(self, line: str) -> list[Point]:
        values, user_step = parse_user(line, self.patterns) if self.patterns else ([], None)
        if user_step is not None:
            self._advance(user_step, None)
        found: list[tuple[str, float, int | None, bool]] = [(n, v, at, at is not None) for n, v, at in values]
        for name, _, _ in values:
            if name not in self.pattern_names and len(self.pattern_names) < MAX_SERIES:
                self.pattern_names.append(name)
        if self.defaults:
            read = self.reader.line(line)
            self._advance(self.reader.steps.step, self.reader.steps.total)
            if not self.only_patterns:
                found.extend((p.name, p.value, p.step, p.own) for p in read)
        points = [self._point(name, value, at, own) for name, value, at, own in found]
        return [p for p in points if p is not None]

    def summary(self) -> dict[str, Any]:
        """What the reader recognised (core/console_reader/gate.py), with the names past MAX_SERIES."""
        summary = {**self.reader.summary(), "dropped_names": self.dropped_names}
        read = list(summary["series"])
        series = read + [n for n in self.pattern_names if n not in read]
        return {**summary, "series": series, "suggestion": summary["suggestion"] if not series else None}

    def _advance(self, step: int | None, total: int | None) -> None:
        if step is not None and 0 <= step <= MAX_STEP:
            self.step = step if self.step is None else max(self.step, step)
        if total is not None and 0 < total <= MAX_STEP:
            self.total = total

    def _point(self, name: str, value: float, at: int | None, own: bool = True) -> Point | None:
        if not name or name == "step":
            return None
        if name not in self.names and len(self.names) >= MAX_SERIES:
            self.dropped_names += 1
            return None
        count = self.names.get(name, 0)
        self.names[name] = count + 1
        if at is None or not own:  # no step on its line: the counter's then (else now's), but after the name's
            # last one (stdout and stderr are read one after the other, so the counter may be ahead or behind)
            hint = at if at is not None else (self.step if self.step is not None else count)
            at = max(hint, self.last_step.get(name, -1) + 1)
        self.last_step[name] = max(at, self.last_step.get(name, -1))
        return Point(step=at, name=name, value=value)


def replay(pieces: Iterable[tuple[str, str]], patterns: list[UserPattern], ended: bool = True) -> list[Point]:
    """The points `patterns` find in a stored console ((stream, text) pieces in the order read), at the steps
    the reader learns from the same lines: a pattern added to a job after its lines were printed. `ended`:
    the last lines count without their newline (a running job's are still being written: the live reader
    reads them when they end)."""
    c = ConsoleMetrics(patterns=patterns, only_patterns=True)
    points = [p for stream, text in pieces for p in c.feed(text, stream)]
    return points + c.flush() if ended else points
