"""What went wrong in a failed attempt: the failing rank, its exit code and traceback lines,
read from torchrun's per-rank error files (error.json) and its "Root Cause" summary."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from trainer.run_dir import RunDir

TRACEBACK_LINES = 30
_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):(.*?)(?:={10,}|\Z)", re.S)
_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)", re.M)
_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)", re.M)
_TB = re.compile(r"^\s*traceback\s*:\s*(.*)$", re.M)


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


def _from_error_json(path: Path) -> Failure | None:
    try:
        data = json.loads(path.read_text())
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


def _from_launcher_log(path: Path) -> Failure | None:
    try:
        text = path.read_text(errors="replace")
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


def _rank_stderr_tail(run: RunDir, attempt: int, rank: int | None) -> list[str]:
    log = run.rank_log(rank if rank is not None else 0, "stderr", attempt)
    if log is None:
        return []
    try:
        return _tail(log.read_text(errors="replace"))
    except OSError:
        return []


def diagnose(run: RunDir, attempt: int, launcher_log: Path, exit_code: int | None) -> Failure:
    """The best account of why an attempt failed, for the job's error columns."""
    summary = _from_launcher_log(launcher_log)
    files = run.error_files(attempt)
    detail = _from_error_json(files[0]) if files else None  # the first written is the root cause
    if detail is not None:
        if summary is not None:
            detail.exit_code = summary.exit_code
            detail.rank = summary.rank if summary.rank is not None else detail.rank
        return detail
    if summary is not None:
        summary.traceback = _rank_stderr_tail(run, attempt, summary.rank)
        return summary
    tail = _tail(launcher_log.read_text(errors="replace")) if launcher_log.exists() else []
    return Failure(message=f"torchrun exited with code {exit_code}", exit_code=exit_code, traceback=tail[-10:])
