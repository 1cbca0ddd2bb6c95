"""What went wrong in a failed attempt: the failing rank, its exit code and traceback lines,
read from torchrun's per-rank error files (error.json) and its "Root Cause" summary.

The built-in trainer's ranks write error.json (@record). A user's script (a script job) does not:
then the failing rank's stderr is read, and its last Python traceback (torch prefixes each line
with `[rankN]:`) gives the message and the lines; without one, its last lines are shown."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from core import run_files
from trainer.run_dir import RunDir

TRACEBACK_LINES = 30
_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):(.*?)(?:={10,}|\Z)", re.S)
_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)", re.M)
_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)", re.M)
_TB = re.compile(r"^\s*traceback\s*:\s*(.*)$", re.M)
_RANK_PREFIX = re.compile(r"^\[(?:default)?rank\d+\]:\s?")
_TB_HEAD = "Traceback (most recent call last):"
# The SDK's own notes (rankzero/): printed by its exit hooks after the traceback, never the headline.
_SDK_NOTE = "rankzero: "
# What torchrun's summary says when the rank wrote no error file (a script without @record).
_NO_ERROR_FILE = ("To enable traceback", "a rank failed")
STDERR_READ_BYTES = 64 << 10
MAX_READ_BYTES = 4 << 20  # an error file or launcher log read whole: never more than this


@dataclass
class Failure:
    message: str
    rank: int | None = None
    exit_code: int | None = None
    traceback: list[str] | None = None

    def text(self) -> str:
        head = self.message
        if self.rank is not None:
            head = (
                f"rank {self.rank} failed"
                + (f" with exit code {self.exit_code}" if self.exit_code is not None else "")
                + f": {head}"
            )
        return "\n".join([head, *(self.traceback or [])]).strip()


def _tail(text: str, n: int = TRACEBACK_LINES) -> list[str]:
    return [line for line in text.strip().splitlines() if line.strip()][-n:]


def _read_tail(path: Path, root: Path, limit: int = MAX_READ_BYTES) -> str:
    """The last `limit` bytes of a file of the run dir (a link the job made there is not followed: it could
    name the worker's own /proc/self/environ, and what is read here becomes the job's error)."""
    with run_files.open_file(path, "rb", root) as fh:
        fh.seek(max(0, fh.seek(0, 2) - limit))
        return fh.read().decode(errors="replace")


def _from_error_json(path: Path, root: Path) -> Failure | None:
    try:
        data = json.loads(run_files.read_text(path, root, errors="strict", max_bytes=MAX_READ_BYTES))
    except (OSError, ValueError):
        return None
    msg = data.get("message", data)
    if isinstance(msg, dict):
        text = str(msg.get("message", ""))
        extra = msg.get("extraInfo", {}) or {}
        stack = str(extra.get("py_callstack", ""))
    else:
        text, stack = str(msg), ""
    rank = int(path.parent.name) if path.parent.name.isdigit() else None
    return Failure(
        message=text.strip().splitlines()[-1] if text.strip() else "error", rank=rank, traceback=_tail(stack or text)
    )


def _from_launcher_log(path: Path, root: Path) -> Failure | None:
    try:
        text = _read_tail(path, root)
    except OSError:
        return None
    found = _ROOT_CAUSE.search(text)
    if not found:
        return None
    block = found.group(1)
    rank = _RANK.search(block)
    code = _EXIT.search(block)
    tb = _TB.search(block)
    return Failure(
        message=(tb.group(1).strip() if tb else "a rank failed"),
        rank=int(rank.group(1)) if rank else None,
        exit_code=int(code.group(1)) if code else None,
    )


def _rank_stderr_lines(run: RunDir, attempt: int, rank: int | None) -> list[str]:
    """The last lines (up to STDERR_READ_BYTES) of a rank's stderr, `[rankN]:` prefixes removed."""
    log = run.rank_log(rank if rank is not None else 0, "stderr", attempt)
    if log is None:
        return []
    try:
        text = _read_tail(log, run.root, STDERR_READ_BYTES)
    except OSError:
        return []
    return [_RANK_PREFIX.sub("", line) for line in text.splitlines()]


def last_traceback(lines: list[str]) -> list[str] | None:
    """The last Python traceback in `lines` (its last TRACEBACK_LINES lines), or None."""
    heads = [i for i, line in enumerate(lines) if line.strip() == _TB_HEAD]
    return _tail("\n".join(lines[heads[-1] :])) if heads else None


def _exception_line(traceback: list[str]) -> str | None:
    """The `ValueError: ...` line closing a traceback (the last line that is not indented)."""
    for line in reversed(traceback):
        if line.strip() and not line[0].isspace() and line.strip() != _TB_HEAD and not line.startswith(_SDK_NOTE):
            return line.strip()
    return None


def _explain_from_stderr(failure: Failure, lines: list[str]) -> None:
    """Fill `failure` (torchrun's summary) from the failing rank's stderr."""
    placeholder = failure.message.startswith(_NO_ERROR_FILE)
    traceback = last_traceback(lines)
    if traceback:
        failure.traceback = traceback
        found = _exception_line(traceback)
        if placeholder and found:
            failure.message = found
        return
    failure.traceback = _tail("\n".join(lines), 10)
    if placeholder:
        code = f"code {failure.exit_code}" if failure.exit_code is not None else "an error"
        failure.message = f"exited with {code} (no Python traceback on its stderr)"


def diagnose(run: RunDir, attempt: int, launcher_log: Path, exit_code: int | None) -> Failure:
    """The best account of why an attempt failed, for the job's error columns."""
    summary = _from_launcher_log(launcher_log, run.root)
    files = run.error_files(attempt)
    detail = _from_error_json(files[0], run.root) if files else None  # the first written is the root cause
    if detail is not None:
        if summary is not None:
            detail.exit_code = summary.exit_code
            detail.rank = summary.rank if summary.rank is not None else detail.rank
        return detail
    if summary is not None:
        _explain_from_stderr(summary, _rank_stderr_lines(run, attempt, summary.rank))
        return summary
    try:
        tail = _tail(_read_tail(launcher_log, run.root))
    except OSError:
        tail = []
    return Failure(message=f"torchrun exited with code {exit_code}", exit_code=exit_code, traceback=tail[-10:])
