"""A job's console lines → points: tokens.read_line, then steps.StepTracker, then gate.SeriesGate.

A table (a header row of names, then rows of numbers under it: fastai, ultralytics) is read by column:
a row's first cells are named by the header's words, the rest of the row is read as any line.
"""

from __future__ import annotations

import re

from core.console_reader.gate import Point, SeriesGate
from core.console_reader.steps import StepTracker
from core.console_reader.tokens import UNITS, Fraction, Line, Pair, header_of, read_line

MAX_NAME_CHARS = 100
_DIGIT = re.compile(r"\d")
_CELL = re.compile(
    r"(?P<num>[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)(?P<unit>[A-Za-z%]{0,3}):?"
    r"|(?P<n>\d+)/(?P<m>\d+):?"
    r"|\d+(?::\d\d)+:?"
)


def _row(header: tuple[str, ...], line: Line) -> Line | None:
    """A table row under `header`: its first cells by column, the rest of the line read as usual."""
    cells = line.columns[: len(header)]
    if len(cells) < len(header):
        return None
    matches = [_CELL.fullmatch(c) for c in cells]
    if not all(matches):
        return None
    row = Line()
    for name, m in zip(header, matches, strict=True):
        if m is None:
            continue
        if m.group("n") is not None:
            row.fractions.append(Fraction(int(m.group("n")), int(m.group("m")), name, False))
        elif m.group("num") is not None and (not m.group("unit") or m.group("unit").lower() in UNITS):
            text = m.group("num")
            row.pairs.append(Pair(name, float(text), text.lstrip("+-").isdigit()))
        # else a clock time (fastai's `time` column): no value
    rest = read_line(" ".join(line.columns[len(header) :]))
    row.pairs.extend(rest.pairs)
    row.fractions.extend(rest.fractions)
    return row


class ConsoleReader:
    """Lines in, points out (step None: no step known yet); `steps.step` / `steps.total` the progress."""

    def __init__(self) -> None:
        self.steps = StepTracker()
        self.gate = SeriesGate()
        self.header: tuple[str, ...] | None = None

    def line(self, text: str) -> list[Point]:
        if _DIGIT.search(text) is None:  # no number: no point (a header row at most), for the cost of one search
            header = header_of(text)
            if header is not None:
                self.header = header
            self.gate.lines += 1
            return []
        parsed = read_line(text)
        if parsed.header is not None:
            self.header = parsed.header
            self.gate.admit(text, [])
            return []
        if self.header is not None:
            parsed = _row(self.header, parsed) or parsed
        seen = self.steps.observe(parsed)
        points = []
        for p in parsed.pairs:
            if p.key in seen.counters:
                continue
            name = f"{seen.label}/{p.key}" if seen.label else p.key
            points.append(Point(seen.step, name[:MAX_NAME_CHARS], p.value, seen.own))
        return self.gate.admit(text, points)

    def summary(self) -> dict[str, object]:
        return self.gate.summary()
