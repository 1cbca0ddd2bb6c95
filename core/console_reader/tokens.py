"""One console line → what it says: `key value` pairs, `N/M` progress fractions, or a table's header row.

Not a list of formats: the separators people print between fields (`|`, `,`, `;`, tabs, ` - `, brackets)
cut a line into fields, and a field's value is a number with at most a unit (`ms`, `s`, `%`, `GiB`,
`it/s`, …) whose key is the text before it in the field (`loss 0.5`, `loss: 0.5`, `loss=0.5`,
`'loss': 0.5`, `Acc@1 0.9`, `ms/batch 45.1`, `D(x): 0.3`). A number in parentheses right after a value is
its running average (`Loss 6.9012e+00 (6.9100e+00)` → `Loss (avg)`); `N/M` is a fraction (`[640/60000]`,
`200/ 2983 batches`, `step 00010/01000`), keyed by the text before it or the word after it; `(4%)` after
it is the same progress again and is skipped.

What only looks numeric is no value: a number glued to digits, dots, colons or dashes on either side
(`2024-01-05`, `12:30:01`, `1.2.3`, `10.0.0.1`, `file.py:96:`), inside a word (`ckpt_1000.pt`, `x86_64`,
`v1.2`), with a unit we do not know (`3x3`, `2nd`), or in a date's `12/01 10:00` (a fraction followed by a
clock time). Keys are bounded (MAX_KEY_WORDS words, MAX_KEY_CHARS characters) and must start with a letter.

Linear in the line: one left-to-right regex scan for the numbers (its alternatives are single character-class
runs: no nested or overlapping quantifiers, so no backtracking that grows with the line), then, per number,
searches of the text between it and the one before (each character is looked at a bounded number of times).
Callers cut lines at a fixed length first (core/console_reader/job.py MAX_LINE_CHARS).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import lru_cache

MAX_KEY_CHARS = 48
MAX_KEY_WORDS = 4

# A number: 1,234,567 | 12 | 1.5 | .5 | 1e-05; then a unit glued on; each alternative one character-class run.
_NUM = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+(?![\d.])|\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
_UNIT = re.compile(r"%|[A-Za-zµ]+(?:/[A-Za-z]+)?")
_FRAC_TAIL = re.compile(r"[ \t]*/[ \t]*(\d+)(?![\d.])")  # after an integer: ` / 1000`
_PERCENT = re.compile(r"[ \t]*\([ \t]*\d+(?:\.\d*)?%\)")
_CLOSE = re.compile(r"[ \t]*\)")
_WORD_AFTER = re.compile(r"[ \t]*([A-Za-z]+)")
UNITS = frozenset(
    [
        "%",
        "ms",
        "s",
        "sec",
        "secs",
        "us",
        "µs",
        "ns",
        "min",
        "m",
        "h",
        "hr",
        "b",
        "kb",
        "mb",
        "gb",
        "tb",
        "kib",
        "mib",
        "gib",
        "tib",
        "k",
        "g",
        "t",
        "it/s",
        "s/it",
        "ms/it",
        "ms/step",
        "s/step",
        "us/step",
        "ms/batch",
        "s/batch",
        "tok/s",
        "tokens/s",
        "tok/sec",
        "samples/s",
        "img/s",
        "flops",
        "gflops",
        "tflops",
    ]
)
_BOUNDARIES = "|,;[]{}\t"  # each ends a field (so does ` - `)
_STRIP = " \t:=\"'`*>#"  # around a key
_HEADER_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_@/.()-]*")
_CLOCK = re.compile(r"\s*\d{1,2}:\d{2}")


@dataclass(frozen=True)
class Pair:
    key: str
    value: float
    integer: bool  # printed without a fraction or exponent (a counter can only be one of these)


@dataclass(frozen=True)
class Fraction:
    n: int
    m: int
    key: str | None  # `step 10/100` → "step"; `200/2983 batches` → "batches"; `[640/60000]` → None
    bracketed: bool  # inside [...]
    leading: bool = False  # nothing read before it on its line: its key labels the line (`Test: [10/196]`)


@dataclass
class Line:
    pairs: list[Pair] = field(default_factory=list)
    fractions: list[Fraction] = field(default_factory=list)
    # The integer right before a bracketed fraction (`Train: 0 [50/1251`, `Epoch: [0][10/5005]`): an epoch.
    outer: Pair | None = None
    header: tuple[str, ...] | None = None  # a row of column names and nothing else (fastai, ultralytics)
    columns: tuple[str, ...] = ()  # the line's whitespace-separated chunks (a header's rows are matched on them)


def _number(text: str) -> float | None:
    try:
        value = float(text.replace(",", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


_COUNT_NOUNS = frozenset(
    ["batches", "batch", "steps", "iters", "iterations", "it", "samples", "examples", "images", "tokens", "updates"]
)
_DENY = frozenset(
    [
        "rank",
        "local_rank",
        "global_rank",
        "gpu",
        "device",
        "cuda",
        "pid",
        "tid",
        "line",
        "node",
        "worker",
        "process",
        "thread",
        "seed",
        "v_num",
    ]
)
# A date's words (`Mon Dec  7 01:00:00 2026`): a day of the month is no value.
_CALENDAR = frozenset(
    [
        "jan",
        "feb",
        "mar",
        "apr",
        "may",
        "jun",
        "jul",
        "aug",
        "sep",
        "oct",
        "nov",
        "dec",
        "mon",
        "tue",
        "wed",
        "thu",
        "fri",
        "sat",
        "sun",
    ]
)


@lru_cache(maxsize=8192)  # a format's fields repeat line after line: their keys are worked out once
def _key_of(prefix: str) -> str | None:
    """The key in the text before a value: its last phrase (after `  `, `) `, ` (` or a tab), no separators."""
    s = prefix.rstrip(_STRIP)
    cut = max(s.rfind("  "), s.rfind(") "), s.rfind(" ("), s.rfind("\t"))
    if cut >= 0:
        s = s[cut + 2 :] if s[cut : cut + 2] in ("  ", ") ", " (") else s[cut + 1 :]
    key = s.strip(_STRIP + "(")
    while key and not key[0].isalpha():  # `/global_step` after `micro_step=10`: the key is what follows
        key = key[1:]
    if ": " in key:  # `Test set: Average loss` → `Average loss` (the part before is a label)
        key = key.rsplit(": ", 1)[1].strip(_STRIP)
    key = " ".join(key.split())
    if not key or not key[0].isalpha() or len(key) > MAX_KEY_CHARS or key.count(" ") >= MAX_KEY_WORDS:
        return None
    if key.lower() in _DENY or key.lower().rsplit(" ", 1)[-1][:3] in _CALENDAR and len(key.split()[-1]) <= 3:
        return None
    return key


def header_of(line: str) -> tuple[str, ...] | None:
    """The column names when `line` is a table's header row (three names or more and nothing else)."""
    return _header(line.split())


def _header(chunks: list[str]) -> tuple[str, ...] | None:
    if len(chunks) < 3 or not all(_HEADER_WORD.fullmatch(c) for c in chunks):
        return None
    return tuple(chunks)


def _field_start(line: str, lo: int, hi: int) -> int:
    """Where the field that ends at `hi` begins: after the last boundary (or ` - `) in line[lo:hi], else `lo`."""
    at = max(line.rfind(c, lo, hi) for c in _BOUNDARIES)
    dash = line.rfind(" - ", lo, hi)
    return max(lo, at + 1 if at >= 0 else lo, dash + 3 if dash >= 0 else lo)


def _glued(line: str, start: int, end: int) -> bool:
    """A number that is part of something else: a date, a clock, a version, a path, a name (see the docstring)."""
    before = line[start - 1] if start > 0 else " "
    if before.isalnum() or before in "_@.":
        return True
    if before in ":-/" and start > 1 and line[start - 2].isdigit():
        return True
    after = line[end : end + 2]
    if after[:1] in (".", "-", ":", "/") and after[1:2].isalnum():
        return True
    return after[:1] == "|"  # a progress bar's percentage (`100%|████|`): its count is read as N/M


def _bracketed(line: str, start: int) -> bool:
    i = start - 1
    while i >= 0 and line[i] in " \t":
        i -= 1
    return i >= 0 and line[i] == "["


def read_line(line: str) -> Line:  # noqa: C901 (one scan over the numbers, its cases side by side)
    """What one line says (see the module's docstring). Pure; linear in the line: the numbers are found by one
    regex scan, and each costs a bounded amount of work on the text before it."""
    chunks = line.split()
    out = Line(header=_header(chunks), columns=tuple(chunks))
    if out.header is not None:
        return out
    field = 0  # where the text after the last value (or skipped number) begins
    last_key: str | None = None  # the key of the value just read: a `(avg)` after it is its running average
    last_unit = ""
    skip_to = 0
    for m in _NUM.finditer(line):
        start, end = m.span()
        if start < skip_to:
            continue
        text = m.group(0)
        um = _UNIT.match(line, end)
        unit = um.group(0).lower() if um else ""
        stop = um.end() if um else end
        begin = _field_start(line, field, start)
        bracket_key = None
        if begin > field:
            last_key = None
            if line[begin - 1] == "[":  # `lr=[0.1]`, `Epoch: [0]`: the key before the bracket names the value
                bracket_key = _key_of(line[_field_start(line, field, begin - 1) : begin - 1])
        integer = not unit and text.isdigit()
        if integer and not (start > 0 and line[start - 1] == "/") and (fm := _FRAC_TAIL.match(line, end)):
            fend = fm.end()
            skip_to = field = fend
            last_key = None
            if (fend < len(line) and line[fend] == "/") or _CLOCK.match(line, fend):
                continue  # 2024/01/05, or the date of `12/01 10:00:00`
            key = _key_of(line[begin:start]) or bracket_key
            if key is None:  # `200/ 2983 batches`: a count noun after it names it
                wm = _WORD_AFTER.match(line, fend)
                key = wm.group(1) if wm and wm.group(1).lower() in _COUNT_NOUNS else None
            bracketed = _bracketed(line, start)
            leading = not out.pairs and not out.fractions
            out.fractions.append(Fraction(int(text), int(fm.group(1)), key, bracketed, leading))
            if bracketed and out.outer is None and out.pairs and out.pairs[-1].integer:
                out.outer = out.pairs[-1]  # `Train: 0 [50/1251`, `Epoch: [0][10/5005]`
            if pm := _PERCENT.match(line, fend):  # `(4%)`: the same progress again
                skip_to = field = pm.end()
            continue
        if start > 0 and (line[start - 1].isalnum() or line[start - 1] in "_@"):
            continue  # a name's digits (`Acc@1`, `bf16_mfu`, `k0`): part of the key text that follows
        value = _number(text)
        if value is None or (unit and unit not in UNITS) or _glued(line, start, stop):
            field, last_key = stop, None
            continue
        prefix = line[begin:start]
        if last_key is not None and unit == last_unit and prefix.strip() == "(" and (cm := _CLOSE.match(line, stop)):
            out.pairs.append(Pair(f"{last_key} (avg)", value, integer))
            field, last_key = cm.end(), None
            continue
        key = _key_of(prefix)
        if key is None and bracket_key is not None and not prefix.strip(" ("):
            key = bracket_key
        if key is not None:
            out.pairs.append(Pair(key, value, integer))
        field, last_key, last_unit = stop, key, unit
    return out
