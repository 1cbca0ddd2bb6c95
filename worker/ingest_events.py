"""Reading rank 0's events.jsonl as it grows: complete lines since the last read, each parsed as JSON.

A torn line (a killed writer) is skipped and the next carries on; a line that never ends is dropped, so
the worker holds at most MAX_EVENT_LINE bytes of it. worker/ingest_handlers.py reads what each event says,
worker/ingest.py writes it."""

from __future__ import annotations

import json
import json.scanner
import logging
from pathlib import Path
from typing import Any

from core import run_files

log = logging.getLogger("rankzero.worker")


MAX_EVENT_LINE = 1 << 20  # bytes of one pending events.jsonl line the worker holds at most

# json.loads spends most of its time per line around the C scanner (detecting the encoding, decoding,
# the Python wrappers): a line that is plain UTF-8 JSON goes to the scanner directly (about half the
# parse time; bench/service.py), and any other line to json.loads, whose rules (a BOM, UTF-16, its
# errors) stay the only ones.
# (typeshed types the C scanner's argument as a scanner; CPython's own json.decoder passes the decoder)
_scan_json = json.scanner.make_scanner(json.JSONDecoder())  # pyright: ignore[reportArgumentType]
_JSON_SPACE = " \t\r"  # JSON's whitespace, bar the newline that ended the line


def parse_line(line: bytes) -> Any:
    """The JSON value on one line of events.jsonl, as `json.loads(line)` reads it (ValueError when it is not)."""
    try:
        text = line.decode("utf-8", "surrogatepass").strip(_JSON_SPACE)
        value, end = _scan_json(text, 0)
        if end == len(text):
            return value
    except (ValueError, StopIteration):  # not plain UTF-8 JSON: json.loads says what it is
        pass
    return json.loads(line)


class EventTail:
    """Complete lines appended to a file since the last call (a partial last line waits)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self._partial = b""
        self.skipping = False  # inside an overlong line: the bytes up to its newline are dropped
        self.overlong_lines = 0

    def read(self, max_bytes: int = 8 << 20) -> list[dict[str, Any]]:
        try:
            with run_files.open_file(self.path, "rb", self.path.parent) as fh:  # a link the job made: not read
                fh.seek(self.offset)
                chunk = fh.read(max_bytes)
        except FileNotFoundError:
            return []
        except run_files.LinkRefused:
            log.warning("%s is a link or not a regular file: not read (the job made it)", self.path)
            return []
        self.offset += len(chunk)
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()
        if self.skipping and lines:  # the rest of a dropped line ends here
            lines[0], self.skipping = b"", False
        if len(self._partial) > MAX_EVENT_LINE:
            # A line that never ends would grow the worker, not the job: drop it, and what follows up to its
            # newline (a real event is a few hundred bytes; the trainer's largest, `failed`, a few KiB).
            self.overlong_lines += 0 if self.skipping else 1
            self._partial, self.skipping = b"", True
        events = []
        for line in lines:
            if not line.strip():
                continue
            try:
                event = parse_line(line)
            except ValueError:
                continue  # a torn line from a killed writer; the next line carries on
            if isinstance(event, dict) and isinstance(event.get("seq"), int):
                events.append(event)
        return events
