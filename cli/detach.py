"""`rankzero up --detach` and `rankzero down`: the API + worker of `rankzero up` as a background
process recorded in a pid file (`<data dir>/rankzero.pid`), for a box without systemd or Docker
(with systemd, deploy/rankzero.service runs `rankzero up` in the foreground instead).

`down` sends the recorded process SIGTERM, as Ctrl-C would: the API stops, the worker drains (running
jobs checkpoint and go back to the queue), then the process exits; SIGKILL only past the timeout."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from core.settings import Settings, write_private

PID_FILE = "rankzero.pid"
UP_LOG = "up.log"
ROOT = Path(__file__).resolve().parent.parent


def pid_file(settings: Settings) -> Path:
    return settings.data_dir / PID_FILE


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def is_our_up(cmdline: list[str]) -> bool:
    """Whether a process's command line is a `rankzero up` this module started (a recycled pid is not)."""
    return "cli.main" in cmdline and "up" in cmdline


def running_pid(settings: Settings) -> int | None:
    """The recorded instance's pid while it runs; a stale file (process gone, pid reused) is removed."""
    path = pid_file(settings)
    try:
        pid = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    if is_our_up(_cmdline(pid)):
        return pid
    path.unlink(missing_ok=True)
    return None


def start(settings: Settings, args: list[str]) -> subprocess.Popen[bytes]:
    """`rankzero up <args>` in its own session, its output appended to <data dir>/up.log; the pid file written."""
    settings.ensure_data_dir()
    log_path = settings.data_dir / UP_LOG
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "up", *args],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, cwd=ROOT,
        )  # fmt: skip
    path = pid_file(settings)
    path.unlink(missing_ok=True)
    write_private(path, f"{proc.pid}\n")
    return proc


def stop(settings: Settings, timeout: float) -> int | None:
    """SIGTERM the recorded instance and wait for it (SIGKILL to its group past `timeout`); its pid, or
    None when none ran."""
    pid = running_pid(settings)
    if pid is None:
        return None
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while is_our_up(_cmdline(pid)) and not _is_zombie(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if is_our_up(_cmdline(pid)) and not _is_zombie(pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    pid_file(settings).unlink(missing_ok=True)
    return pid


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True
