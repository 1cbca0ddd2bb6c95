"""Metrics and progress from a script's console: rank 0's stdout/stderr lines → (step, name, value) points.

Pure (no I/O): `ConsoleMetrics.feed(text)` takes what the logs grew by and returns the points its
complete lines hold; `step` / `total` are the step counter that drives the job's progress when the
script reports none through the SDK. Carriage-return updates (tqdm redraws its bar with `\\r`) are lines
of their own; ANSI colours are dropped; a line is cut at MAX_LINE_CHARS before any pattern sees it.

The default patterns catch the popular loops' formats and nothing that only looks numeric (a date,
a version, a path, a clock time: a value must be a whole number token, followed by a unit at most):

    iter 10: loss 3.9123, time 40.12ms, mfu -100.00%      nanoGPT: step 10, loss, time (ms dropped), mfu
    step 20: train loss 3.1021, val loss 3.2113           step 20, `train loss`, `val loss`
    {'loss': 2.31, 'learning_rate': 5e-05, 'epoch': 0.5}  Hugging Face Trainer (step: the counter so far)
    Epoch 1: 40%|████| 4/10 [00:01<00:02, loss=0.512]    tqdm / Lightning postfix (step: epoch × total + n)
    Epoch 3/10  …  - loss: 0.1 - acc: 0.9                 Keras (the epoch line sets the step)
    loss: 0.25                                            Guild's `KEY: NUMBER` at a line's start
                                                          (`step: N` sets the step)

A point with no step of its own takes the counter's (past the name's last step, so none is lost);
before any counter, a name's own count of points (0, 1, 2, …). User patterns (spec `console_metrics`)
run with RE2, whose matching time is linear in the line: named groups `value` and `key` (or a fixed
`name`), optionally `step`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from trainer.spec import compile_console_regex

MAX_LINE_CHARS = 4096  # a longer line is cut here (a progress bar or a dict line is far shorter)
MAX_NAME_CHARS = 100
MAX_SERIES = 64  # distinct console series per job: names past it are dropped
MAX_STEP = 10**12

NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
UNIT = r"(?:ms|us|µs|s|sec|min|h|%|it/s|s/it|samples/s|tok/s|tokens/s)?"
_END = r"(?=$|[\s,|;\]\}\)])"  # a value ends at a separator: `2024-01-05`, `1.2.3`, `12:30` are no values

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_NAME = r"[A-Za-z_][A-Za-z0-9_./-]*(?: [A-Za-z_][A-Za-z0-9_./-]*){0,3}"

# `iter 10: …`, `step 20: …`, `Step 5 | …` — then `name value[unit]` pairs split by `,` or `|`.
_STEP_LINE = re.compile(r"^\s*(?:iter|iteration|step)\s+(\d{1,12})\s*[:|,]\s*(.+)$", re.IGNORECASE)
_PAIR = re.compile(rf"^\s*({_NAME})\s*[:=]?\s+({NUMBER}){UNIT}\s*$")
_PAIR_EQ = re.compile(rf"^\s*({_NAME})\s*[:=]\s*({NUMBER}){UNIT}\s*$")
# Hugging Face: a whole line that is a dict of 'key': number.
_DICT_LINE = re.compile(r"^\s*\{.*\}\s*$")
_DICT_ITEM = re.compile(rf"""['"]([^'"\n]{{1,{MAX_NAME_CHARS}}})['"]\s*:\s*({NUMBER}){_END}""")
# tqdm: `4/10 [00:01<00:02, 3.51it/s, loss=0.512, v_num=0]`, maybe after `Epoch 1: 40%|███|`.
_TQDM = re.compile(r"(?:^|\s|\|)(\d{1,12})/(\d{1,12})\s*\[[\d:.]+<[\d:.?]+([^\]]*)\]")
_BYTES_RATE = re.compile(r"\d[kKMGT]?i?B/s")
_TQDM_EPOCH = re.compile(r"^\s*Epoch\s+(\d{1,9})\s*:", re.IGNORECASE)
_POSTFIX = re.compile(rf"([A-Za-z_][A-Za-z0-9_./-]{{0,{MAX_NAME_CHARS}}})=({NUMBER}){_END}")
# Keras: `Epoch 3/10` on its own line, then `… - loss: 0.1234 - accuracy: 0.9000`.
_KERAS_EPOCH = re.compile(r"^\s*Epoch\s+(\d{1,9})/(\d{1,9})\s*$")
_KERAS_ITEM = re.compile(rf"(?:^|\s-\s)({_NAME}):\s+({NUMBER}){_END}")
_KERAS_LINE = re.compile(rf"\s-\s{_NAME}:\s+{NUMBER}")
# Guild: `KEY: NUMBER` at the start of a line and nothing after.
_GUILD = re.compile(rf"^([A-Za-z_][A-Za-z0-9_./-]{{0,{MAX_NAME_CHARS}}}):\s+({NUMBER})\s*$")

SKIPPED_NAMES = frozenset({"v_num"})  # Lightning's log version: a number, not a metric


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


@dataclass(frozen=True)
class Found:
    """What one line said: points (step None: take the counter's), a step counter, a total."""

    values: tuple[tuple[str, float, int | None], ...] = ()
    step: int | None = None
    total: int | None = None


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _clean_name(name: str) -> str:
    return " ".join(name.split())[:MAX_NAME_CHARS]


def _pairs(chunks: Iterable[str], pattern: re.Pattern[str]) -> list[tuple[str, float, int | None]]:
    out: list[tuple[str, float, int | None]] = []
    for chunk in chunks:
        m = pattern.match(chunk)
        if m and (value := _number(m.group(2))) is not None:
            out.append((_clean_name(m.group(1)), value, None))
    return out


def _step_line(line: str) -> Found | None:
    m = _STEP_LINE.match(line)
    if not m:
        return None
    step = int(m.group(1))
    values = _pairs(re.split(r"[,|]", m.group(2)), _PAIR)
    return Found(tuple((n, v, step) for n, v, _ in values), step=step)


def _dict_line(line: str) -> Found | None:
    if not _DICT_LINE.match(line):
        return None
    values = []
    for m in _DICT_ITEM.finditer(line):
        if (value := _number(m.group(2))) is not None:
            values.append((_clean_name(m.group(1)), value, None))
    return Found(tuple(values)) if values else None


def _tqdm_line(line: str) -> Found | None:
    bars = list(_TQDM.finditer(line))
    if not bars:
        return None
    bar = bars[-1]  # a redraw may leave an older bar's text before the newest one
    if _BYTES_RATE.search(bar.group(3)):
        return Found()  # a download's bar counts bytes, not steps
    n, total = int(bar.group(1)), int(bar.group(2))
    epoch = _TQDM_EPOCH.match(line)
    if epoch and total > 0:  # Lightning counts batches within an epoch: the global step goes on across them
        step, whole = int(epoch.group(1)) * total + n, None
    else:
        step, whole = n, total
    values = []
    for m in _POSTFIX.finditer(bar.group(3)):
        name = m.group(1)
        if name not in SKIPPED_NAMES and (value := _number(m.group(2))) is not None:
            values.append((_clean_name(name), value, step))
    return Found(tuple(values), step=step, total=whole)


def _keras_line(line: str) -> Found | None:
    if m := _KERAS_EPOCH.match(line):
        return Found(step=int(m.group(1)), total=int(m.group(2)))
    if not _KERAS_LINE.search(line):
        return None
    values = []
    for m in _KERAS_ITEM.finditer(line):
        if (value := _number(m.group(2))) is not None:
            values.append((_clean_name(m.group(1)), value, None))
    return Found(tuple(values)) if values else None


def _guild_line(line: str) -> Found | None:
    m = _GUILD.match(line)
    if not m or (value := _number(m.group(2))) is None:
        return None
    if m.group(1) == "step":
        return Found(step=int(value)) if value.is_integer() and value >= 0 else None
    return Found(((_clean_name(m.group(1)), value, None),))


DEFAULTS = (_step_line, _dict_line, _tqdm_line, _keras_line, _guild_line)


def parse_default(line: str) -> Found | None:
    """What the default patterns read in one line (the first format that matches), or None."""
    for parse in DEFAULTS:
        found = parse(line)
        if found is not None:
            return found
    return None


def parse_user(line: str, patterns: Iterable[UserPattern]) -> Found | None:
    """What the user's patterns read in one line (every pattern, every match), or None."""
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
                values.append((_clean_name(name), value, at))
    if not values and step is None:
        return None
    return Found(tuple(values), step=step)


def _int_or_none(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        n = int(text)
    except ValueError:
        return None
    return n if 0 <= n <= MAX_STEP else None


def compile_patterns(patterns: Iterable[dict[str, Any]]) -> list[UserPattern]:
    """The spec's patterns (validated at submit: trainer/spec.py ConsolePattern) compiled with RE2."""
    return [UserPattern(compile_console_regex(p["regex"]), p.get("name")) for p in patterns]


def split_lines(text: str) -> list[str]:
    """Lines of `text`, `\\r` redraws included, colours dropped, each cut at MAX_LINE_CHARS."""
    text = _ANSI.sub("", text)
    return [line[:MAX_LINE_CHARS] for line in re.split(r"\r\n|\r|\n", text) if line.strip()]


@dataclass
class ConsoleMetrics:
    """The parser's state for one job: the step counter, each name's count, the partial last line."""

    defaults: bool = True
    patterns: list[UserPattern] = field(default_factory=list)
    step: int | None = None  # the step counter (drives progress); None until a line names a step
    total: int | None = None
    names: dict[str, int] = field(default_factory=dict)  # name → points so far (the step before any counter)
    last_step: dict[str, int] = field(default_factory=dict)  # name → its newest point's step
    dropped_names: int = 0
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
        found = [f for f in (parse_user(line, self.patterns), parse_default(line) if self.defaults else None) if f]
        points: list[Point] = []
        for f in found:
            if f.step is not None and 0 <= f.step <= MAX_STEP:
                self.step = f.step if self.step is None else max(self.step, f.step)
            if f.total is not None and 0 < f.total <= MAX_STEP:
                self.total = f.total
            for name, value, at in f.values:
                point = self._point(name, value, at)
                if point is not None:
                    points.append(point)
        return points

    def _point(self, name: str, value: float, at: int | None) -> Point | None:
        if not name or name == "step":
            return None
        if name not in self.names and len(self.names) >= MAX_SERIES:
            self.dropped_names += 1
            return None
        count = self.names.get(name, 0)
        self.names[name] = count + 1
        if at is None:  # no step on its line: the counter's, but after the name's last one (stdout and
            # stderr are read one after the other, so a counter on the other stream may be ahead or behind)
            at = max(self.step if self.step is not None else count, self.last_step.get(name, -1) + 1)
        self.last_step[name] = max(at, self.last_step.get(name, -1))
        return Point(step=at, name=name, value=value)
