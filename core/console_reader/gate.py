"""Which keys are series, and what the reader says it read.

A key becomes a series once it has had a number on REPEAT lines: its points until then are held (at most
REPEAT - 1 a key) and let through together, so one-off lines (a config dump's `lr: 0.1`, `number of
parameters: 10.65M`, a final `test acc 0.9`) make no points. Keys past MAX_KEYS are not followed (counted).

The summary: the series' names and an example line (the one that gave the most of them), the lines read,
and, when no series was recognised, a pattern suggested from the most frequent numeric line shape (its
numbers replaced), ready for the spec's `console_metrics.patterns` (RE2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

REPEAT = 3
MAX_KEYS = 1024  # keys followed per job (held or let through)
MAX_SHAPES = 256  # distinct numeric line shapes counted for a suggestion
MAX_EXAMPLE_CHARS = 200
_NUM = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
_SPACES = re.compile(r"\s+")


@dataclass(frozen=True)
class Point:
    step: int | None  # None: the caller's fallback (no step known yet)
    name: str
    value: float
    own: bool = True  # the step is the line's own; False: the job's current step then, a hint


@dataclass
class SeriesGate:
    repeat: int = REPEAT
    lines: int = 0  # lines read
    series: list[str] = field(default_factory=list)  # keys let through, in order
    dropped_keys: int = 0
    example: str | None = None
    _example_names: int = 0
    series_set: set[str] = field(default_factory=set)
    _held: dict[str, list[Point]] = field(default_factory=dict)
    _shapes: dict[str, tuple[int, str]] = field(default_factory=dict)  # shape → (count, first line)

    def admit(self, line: str, points: list[Point]) -> list[Point]:
        """The points of `line` that may be written now (with any held ones of a key that just qualified)."""
        self.lines += 1
        out: list[Point] = []
        released: set[str] = set()
        for p in points:
            if p.name in released or p.name in self.series_set:
                out.append(p)
                continue
            held = self._held.get(p.name)
            if held is None:
                if len(self._held) + len(self.series) >= MAX_KEYS:
                    self.dropped_keys += 1
                    continue
                held = self._held[p.name] = []
            held.append(p)
            if len(held) >= self.repeat:
                out.extend(self._held.pop(p.name))
                self.series.append(p.name)
                self.series_set.add(p.name)
                released.add(p.name)
        names = {p.name for p in out}
        if len(names) > self._example_names:
            self.example, self._example_names = line[:MAX_EXAMPLE_CHARS], len(names)
        if not self.series and not points:
            self._count_shape(line)
        return out

    def _count_shape(self, line: str) -> None:
        if not _NUM.search(line):
            return
        shape = _NUM.sub("#", line.strip())
        found = self._shapes.get(shape)
        if found is not None:
            self._shapes[shape] = (found[0] + 1, found[1])
        elif len(self._shapes) < MAX_SHAPES:
            self._shapes[shape] = (1, line.strip()[:MAX_EXAMPLE_CHARS])

    def suggestion(self) -> dict[str, str] | None:
        """When nothing was recognised: the most frequent numeric line (seen twice at least), and an RE2
        pattern for it: its first integer as the step (when it has two numbers or more), its last number
        as the value, named `metric` (rename it)."""
        if self.series or not self._shapes:
            return None
        count, line = max(self._shapes.values(), key=lambda v: v[0])
        if count < 2:
            return None
        return {"line": line, "regex": suggest_regex(line), "name": "metric"}

    def summary(self) -> dict[str, object]:
        return {
            "lines": self.lines,
            "series": list(self.series),
            "example": self.example,
            "suggestion": self.suggestion(),
            "dropped_keys": self.dropped_keys,
        }


def suggest_regex(line: str) -> str:
    """`epoch 3 0.25 0.9` → `^epoch\\s+(?P<step>\\d+)\\s+[-+0-9.eE]+\\s+(?P<value>[-+0-9.eE]+)$`."""
    numbers = list(_NUM.finditer(line))
    step_at = next((i for i, m in enumerate(numbers) if m.group(0).isdigit()), None) if len(numbers) > 1 else None
    parts, pos = [], 0
    for i, m in enumerate(numbers):
        parts.append(_literal(line[pos : m.start()]))
        if i == len(numbers) - 1:
            parts.append(r"(?P<value>[-+0-9.eE]+)")
        elif i == step_at:
            parts.append(r"(?P<step>\d+)")
        else:
            parts.append(r"[-+0-9.eE]+")
        pos = m.end()
    parts.append(_literal(line[pos:]))
    return "^" + "".join(parts) + "$"


def _literal(text: str) -> str:
    return r"\s+".join(re.escape(chunk) for chunk in _SPACES.split(text)) if text.strip() else (r"\s+" if text else "")
