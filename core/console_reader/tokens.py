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

Linear in the line: one left-to-right scan with a tokenising regex whose alternatives are single
character-class runs (no nested or overlapping quantifiers, so no backtracking that grows with the line),
then constant work per token. Callers cut lines at a fixed length first (worker/console_metrics.py).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

MAX_KEY_CHARS = 48
MAX_KEY_WORDS = 4

# num: 1,234,567 | 12 | 1.5 | .5 | 1e-05, then a unit glued on; word: letters, digits, _ joined by ./@- ;
# space; anything else one character at a time.
_TOKEN = re.compile(
    r"(?P<num>[-+]?(?:\d{1,3}(?:,\d{3})+(?![\d.])|\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)"
    r"(?P<unit>%|[A-Za-zµ]+(?:/[A-Za-z]+)?)?"
    r"|(?P<word>[A-Za-z_][A-Za-z0-9_]*(?:[./@-][A-Za-z0-9_]+)*)"
    r"|(?P<space>\s+)"
    r"|(?P<other>.)"
)
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
_GLUE_BEFORE = frozenset(".:-/")  # after a digit and one of these, a number is part of a date, clock or version
_BOUNDARY = frozenset("|,;[]{}")  # always ends a field
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


@dataclass
class _Tok:
    kind: str  # num | word | space | other
    text: str
    start: int
    end: int
    value: float = 0.0
    unit: str = ""
    clean: bool = True  # a number that is a value (not glued into a date, a version, a path)


def _number(text: str) -> float | None:
    try:
        value = float(text.replace(",", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _tokens(line: str) -> list[_Tok]:
    out: list[_Tok] = []
    for m in _TOKEN.finditer(line):
        kind = m.lastgroup or "other"
        if kind == "unit":
            kind = "num"
        text = m.group(0)
        tok = _Tok(kind, text, m.start(), m.end())
        if m.group("num") is not None:
            tok.kind = "num"
            value = _number(m.group("num"))
            tok.unit = (m.group("unit") or "").lower()
            tok.value = value if value is not None else 0.0
            tok.clean = value is not None and (not tok.unit or tok.unit in UNITS)
            tok.text = m.group("num")
        out.append(tok)
    for i, tok in enumerate(out):
        if tok.kind != "num" or not tok.clean:
            continue
        before = line[tok.start - 1] if tok.start > 0 else " "
        before2 = line[tok.start - 2] if tok.start > 1 else " "
        after = line[tok.end : tok.end + 2]
        if before.isalnum() or before == "_" or (before in _GLUE_BEFORE and (before2.isdigit() or before == ".")):
            tok.clean = False  # 2024-[01], 12:[30], 1.2[.3], x[86]: part of a date, a clock, a version
        elif after[:1] in (".", "-", ":", "/") and after[1:2].isalnum():
            tok.clean = False  # [2024]-01, [12]:30, [96]:log_dist, [1]/2 (a fraction is read apart, below)
        elif i + 1 < len(out) and out[i + 1].kind == "word" and out[i + 1].start == tok.end:
            tok.clean = False  # a number run into a word (a unit we do not know)
        elif after[:1] == "|":
            tok.clean = False  # a progress bar's percentage (`100%|████|`): its count is read as N/M
    return out


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


def _is_int(tok: _Tok) -> bool:
    return tok.kind == "num" and tok.clean and not tok.unit and tok.text.lstrip("+-").replace(",", "").isdigit()


def _header(chunks: list[str]) -> tuple[str, ...] | None:
    if len(chunks) < 3 or not all(_HEADER_WORD.fullmatch(c) for c in chunks):
        return None
    return tuple(chunks)


def _skip_space(toks: list[_Tok], i: int) -> int:
    while i < len(toks) and toks[i].kind == "space":
        i += 1
    return i


def _fraction_end(line: str, toks: list[_Tok], i: int) -> int | None:
    """The index of the denominator when toks[i] starts `N/M` (spaces around `/` allowed), else None."""
    tok = toks[i]
    if tok.kind != "num" or tok.unit or not tok.text.isdigit() or (tok.start > 0 and line[tok.start - 1] == "/"):
        return None
    j = _skip_space(toks, i + 1)
    if j >= len(toks) or toks[j].text != "/":
        return None
    k = _skip_space(toks, j + 1)
    if k >= len(toks) or toks[k].kind != "num" or toks[k].unit or not toks[k].text.isdigit():
        return None
    end = toks[k].end
    if (end < len(line) and line[end] == "/") or _CLOCK.match(line, end):
        return None  # 2024/01/05, or the date of `12/01 10:00:00`
    return k


def _percent_after(toks: list[_Tok], i: int) -> int:
    """Past a `(4%)` at toks[i] (the same progress as the fraction before it), else i."""
    p = _skip_space(toks, i)
    if p < len(toks) and toks[p].text == "(":
        q = _skip_space(toks, p + 1)
        if q + 1 < len(toks) and toks[q].kind == "num" and toks[q].unit == "%" and toks[q + 1].text == ")":
            return q + 2
    return i


def read_line(line: str) -> Line:  # noqa: C901 (one scan over the tokens, its cases side by side)
    """What one line says (see the module's docstring). Pure; linear in the line."""
    chunks = line.split()
    out = Line(header=_header(chunks), columns=tuple(chunks))
    if out.header is not None:
        return out
    toks = _tokens(line)
    key_start = 0  # where the current field's text begins
    last_key: str | None = None  # the key of the value just read: a `(avg)` after it is its running average
    last_unit = ""
    bracket_key: str | None = None  # `lr=[0.1]`, `Epoch: [0]`: the key before a bracket names the value inside
    i, n = 0, len(toks)
    while i < n:
        tok = toks[i]
        if tok.kind == "other" and tok.text in _BOUNDARY:
            bracket_key = _key_of(line[key_start : tok.start]) if tok.text == "[" else None
            key_start, last_key = tok.end, None
        elif (tok.kind == "space" and "\t" in tok.text) or (
            tok.text == "-" and line[tok.start - 1 : tok.start] == " " and line[tok.end : tok.end + 1] == " "
        ):
            key_start, last_key = tok.end, None  # a tab, or Keras's ` - `
        elif tok.kind == "num" and (k := _fraction_end(line, toks, i)) is not None:
            key = _key_of(line[key_start : tok.start]) or bracket_key
            if key is None:  # `200/ 2983 batches`: a count noun after it names it
                w = _skip_space(toks, k + 1)
                key = toks[w].text if w < n and toks[w].text.lower() in _COUNT_NOUNS else None
            bracketed = line[: tok.start].rstrip().endswith("[")
            leading = not out.pairs and not out.fractions
            out.fractions.append(Fraction(int(tok.text), int(toks[k].text), key, bracketed, leading))
            if bracketed and out.outer is None and out.pairs and out.pairs[-1].integer:
                out.outer = out.pairs[-1]  # `Train: 0 [50/1251`, `Epoch: [0][10/5005]`
            i = _percent_after(toks, k + 1)
            key_start, last_key, bracket_key = toks[i - 1].end, None, None
            continue
        elif tok.kind == "num" and not tok.clean:
            key_start, last_key = tok.end, None
        elif tok.kind == "num":
            prefix = line[key_start : tok.start]
            same_unit = tok.unit == last_unit
            if last_key is not None and same_unit and prefix.strip() == "(" and i + 1 < n and toks[i + 1].text == ")":
                out.pairs.append(Pair(f"{last_key} (avg)", tok.value, _is_int(tok)))
                key_start, last_key = toks[i + 1].end, None
                i += 2
                continue
            key = _key_of(prefix)
            if key is None and not prefix.strip(" (") and bracket_key is not None:
                key = bracket_key
            if key is not None:
                out.pairs.append(Pair(key, tok.value, _is_int(tok)))
            key_start, last_key, last_unit, bracket_key = tok.end, key, tok.unit, None
        i += 1
    return out
