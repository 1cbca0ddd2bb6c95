"""One console for a job: every rank's stdout and stderr merged in time order (issue 22 item 4).

torchrun writes each rank's streams to their own files (`<attempt>/<local rank>/stdout.log`, no
timestamps; trainer/run_dir.py). They stay as they are. Beside each, the worker keeps a **marks** file
(`stdout.marks`): whenever it sees the log grown (each tick of its loop, at most every `MARK_EVERY_S`)
it appends one fixed-width record, `<size> <unix time>`: the bytes before `size` had been written by
then. A line's time is that of the first mark at or past its end (lines after the last mark: the log's
mtime), so lines are ordered to within a tick, and lines of one file keep their order.

Reading is bounded: the merged view reads at most `budget` bytes of logs in all (split among the
files), and only the marks records of the bytes it read (records are fixed-width: found by binary
search). A follower passes back the `cursor` of its last read (each file's next offset).

Logs and marks lie in the job's run dir, which the job writes: every open goes through core/run_files.py
(no link followed below the root, regular files only, never blocking on a FIFO), for the worker's appends
(`stdout.marks -> /etc/...` would append as the worker) and the API's reads alike.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from core import run_files

RECORD = 40  # bytes per marks record: 20-digit size, space, 18-character time, newline
MARK_EVERY_S = 0.5  # at most this often per log: a chatty job's marks stay ≤ a record per half second
MAX_MARKS_READ = 16_384  # records read for one chunk of one log (beyond: the log's mtime stands in)
STREAMS = ("stdout", "stderr")
ENVIRONMENT = "environment"  # node 0's environment log (uv's output before the ranks start): shown as rank 0's
_KEYS = {"stdout": "o", "stderr": "e", ENVIRONMENT: "p"}  # a cursor's letter per source (p: preparing)
_ORDER = {ENVIRONMENT: 0, "stdout": 1, "stderr": 2}  # within one tick: the build before the ranks' output
MAX_FILES = 128  # logs merged at once (64 ranks × 2 streams); the single-rank views show any rank
_CURSOR_PART = re.compile(r"^(\d{1,4})([oep])(\d{1,16})$")
MAX_CURSOR_CHARS = MAX_FILES * 24


def marks_path(log: Path) -> Path:
    """`.../0/stdout.log` → `.../0/stdout.marks`."""
    return log.with_name(f"{log.stem}.marks")


def encode_mark(size: int, at: float) -> bytes:
    record = f"{size:020d} {at:018.6f}\n".encode()
    assert len(record) == RECORD
    return record


def decode_mark(record: bytes) -> tuple[int, float] | None:
    """(size, time) of one record, or None for a torn or damaged one."""
    try:
        size, at = record.decode("ascii").split()
        return int(size), float(at)
    except (UnicodeDecodeError, ValueError):
        return None


class MarkWriter:
    """The worker's side: `note(now)` each tick appends a mark for every log of the attempt that grew."""

    def __init__(self, attempt_dir: Path, rescan_s: float = 2.0) -> None:
        self.attempt_dir = attempt_dir
        self.rescan_s = rescan_s
        self._sizes: dict[Path, int] = {}
        self._marked_at: dict[Path, float] = {}
        self._scanned_at: float | None = None

    def _scan(self, now: float) -> None:
        if self._scanned_at is not None and now - self._scanned_at < self.rescan_s:
            return
        self._scanned_at = now
        for stream in STREAMS:
            for log in self.attempt_dir.glob(f"**/{stream}.log"):
                self._sizes.setdefault(log, _marked_size(log, self.attempt_dir))

    def note(self, now: float, final: bool = False) -> None:
        """Mark every log that grew since its last mark (`final`: at the attempt's end, whatever the interval)."""
        self._scan(now if not final else float("inf"))
        for log, before in self._sizes.items():
            if not final and now - self._marked_at.get(log, 0.0) < MARK_EVERY_S:
                continue
            try:
                size = log.stat().st_size
            except OSError:
                continue
            if size <= before:
                continue
            try:
                with run_files.open_file(marks_path(log), "ab", self.attempt_dir) as out:  # no job's link
                    out.write(encode_mark(size, now))
            except OSError:
                continue  # a full disk: the lines fall back to the log's mtime
            self._sizes[log], self._marked_at[log] = size, now


def _marked_size(log: Path, root: Path | None = None) -> int:
    """The size the last mark of `log` recorded (a restarted worker goes on from there), 0 if none."""
    path = marks_path(log)
    try:
        with run_files.open_file(path, "rb", root or log.parent) as fh:
            end = fh.seek(0, os.SEEK_END)
            if end < RECORD:
                return 0
            fh.seek(end - end % RECORD - RECORD)
            found = decode_mark(fh.read(RECORD))
    except OSError:
        return 0
    return found[0] if found else 0


def read_marks(log: Path, start: int, end: int, root: Path | None = None) -> list[tuple[int, float]]:
    """The marks whose size lies in (start, end], and the first one past `end` (at most MAX_MARKS_READ); no link
    followed below `root` (default: the log's folder)."""
    try:
        fh = run_files.open_file(marks_path(log), "rb", root or log.parent)  # closed below; missing: no marks
    except OSError:
        return []
    with fh:
        count = fh.seek(0, os.SEEK_END) // RECORD
        lo, hi = 0, count
        while lo < hi:  # the first record with size > start
            mid = (lo + hi) // 2
            fh.seek(mid * RECORD)
            found = decode_mark(fh.read(RECORD))
            if found is not None and found[0] <= start:
                lo = mid + 1
            else:
                hi = mid
        fh.seek(lo * RECORD)
        data = fh.read(min(count - lo, MAX_MARKS_READ) * RECORD)
    marks: list[tuple[int, float]] = []
    for i in range(0, len(data) - RECORD + 1, RECORD):
        found = decode_mark(data[i : i + RECORD])
        if found is None:
            continue
        marks.append(found)
        if found[0] >= end:
            break
    return marks


@dataclass(frozen=True)
class LogFile:
    rank: int
    stream: str  # "stdout" | "stderr" | "environment"
    path: Path
    root: Path | None = None  # opened with no link followed below this folder (default: the log's own)

    @property
    def key(self) -> str:
        return f"{self.rank}{_KEYS[self.stream]}"  # 0o / 0e / 0p (std[o]ut, std[e]rr, [p]reparing)


@dataclass(frozen=True)
class ConsoleLine:
    rank: int
    stream: str
    time: float
    text: str
    offset: int  # where the line starts in its log


def parse_cursor(cursor: str) -> dict[str, int]:
    """`0o120.0e0.1o77` → {"0o": 120, "0e": 0, "1o": 77}; ValueError saying what is wrong."""
    if len(cursor) > MAX_CURSOR_CHARS:
        raise ValueError(f"cursor is longer than {MAX_CURSOR_CHARS} characters: pass back the one a read returned")
    offsets: dict[str, int] = {}
    for part in filter(None, cursor.split(".")):
        found = _CURSOR_PART.match(part)
        if found is None:
            raise ValueError(
                f"cursor part {part[:40]!r} is not <rank><o|e|p><offset>: pass back the one a read returned"
            )
        offsets[found.group(1) + found.group(2)] = int(found.group(3))
    return offsets


def format_cursor(offsets: dict[str, int]) -> str:
    return ".".join(f"{key}{offset}" for key, offset in sorted(offsets.items()))


def _lines_of(data: bytes, start: int, whole: bool) -> tuple[list[tuple[int, int, bytes]], int]:
    """(start offset, end offset, line bytes) of each complete line in `data` (read at `start`), and where
    the next read starts; `whole`: the last line counts even without its newline (the log is done)."""
    out: list[tuple[int, int, bytes]] = []
    pos = 0
    while pos < len(data):
        cut = data.find(b"\n", pos)
        if cut < 0:
            if not whole:
                break
            cut = len(data) - 1
        out.append((start + pos, start + cut + 1, data[pos : cut + 1]))
        pos = cut + 1
    return out, start + pos


def _read_window(log: LogFile, offset: int | None, budget: int, done: bool) -> tuple[list[ConsoleLine], int]:
    """Lines of one log: from `offset` (a follower's), else its last `budget` bytes from a line start."""
    try:
        with run_files.open_file(log.path, "rb", log.root or log.path.parent) as fh:
            size = fh.seek(0, os.SEEK_END)
            mtime = os.fstat(fh.fileno()).st_mtime
            if offset is None:
                start = max(0, size - budget)
                fh.seek(start)
                data = fh.read(size - start)
                if start > 0:  # begin at a line start: drop the partial first line
                    cut = data.find(b"\n")
                    start, data = (start + cut + 1, data[cut + 1 :]) if cut >= 0 else (size, b"")
            else:
                start = min(offset, size)
                fh.seek(start)
                data = fh.read(min(budget, size - start))
    except OSError:
        return [], offset or 0
    whole = done and start + len(data) >= size
    spans, next_offset = _lines_of(data, start, whole)
    if not spans:
        return [], next_offset
    marks = read_marks(log.path, spans[0][0], spans[-1][1], log.root)
    lines, i = [], 0
    for begin, end, raw in spans:
        while i < len(marks) and marks[i][0] < end:
            i += 1
        at = marks[i][1] if i < len(marks) else mtime
        text = raw.decode("utf-8", errors="replace").rstrip("\n").rstrip("\r")
        lines.append(ConsoleLine(log.rank, log.stream, at, text, begin))
    return lines, next_offset


def merge(chunks: Iterable[list[ConsoleLine]]) -> list[ConsoleLine]:
    """Every line in time order; ties (one tick) by rank, stdout before stderr, then position."""
    every = [line for chunk in chunks for line in chunk]
    every.sort(key=lambda ln: (ln.time, ln.rank, _ORDER[ln.stream], ln.offset))
    return every


def read_console(
    logs: list[LogFile], cursor: dict[str, int] | None, budget: int, done: bool
) -> tuple[list[ConsoleLine], dict[str, int]]:
    """The merged lines of `logs` (the newest `budget` bytes in all, or on from `cursor`) and the next cursor.
    `done`: the attempt ended, so a last line without a newline is shown too."""
    logs = logs[:MAX_FILES]
    share = max(4096, budget // max(1, len(logs)))
    chunks, offsets = [], {}
    for log in logs:
        lines, offsets[log.key] = _read_window(log, None if cursor is None else cursor.get(log.key, 0), share, done)
        chunks.append(lines)
    return merge(chunks), offsets


def matching(lines: list[ConsoleLine], query: str) -> list[ConsoleLine]:
    """The lines that contain `query` (case-insensitive); all of them for an empty query."""
    if not query:
        return lines
    folded = query.casefold()
    return [line for line in lines if folded in line.text.casefold()]
