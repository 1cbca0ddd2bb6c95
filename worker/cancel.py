"""Stopping a job's processes: SIGTERM (the trainer checkpoints and exits 75), a grace period, SIGKILL."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from worker.procs import pids_of_run, pids_with_mark, signal_all


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def stop(proc: subprocess.Popen[bytes], mark: str, grace_s: float) -> int | None:
    """Stop torchrun and every rank; return torchrun's exit code. No process carrying `mark` is left."""
    _signal_group(proc, signal.SIGTERM)
    signal_all(pids_with_mark(mark), signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if proc.poll() is not None and not pids_with_mark(mark):
            return proc.returncode
        time.sleep(0.1)
    _signal_group(proc, signal.SIGKILL)
    signal_all(pids_with_mark(mark), signal.SIGKILL)
    return wait_gone(proc, mark)


def wait_gone(proc: subprocess.Popen[bytes], mark: str, timeout_s: float = 10.0) -> int | None:
    """Reap torchrun and make sure no rank outlives it (an orphaned rank is SIGKILLed)."""
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _signal_group(proc, signal.SIGKILL)
        proc.wait(timeout=timeout_s)
    deadline = time.monotonic() + timeout_s
    while (left := pids_with_mark(mark)) and time.monotonic() < deadline:
        signal_all(left, signal.SIGKILL)
        time.sleep(0.05)
    return proc.returncode


def stop_earlier_attempts(
    run_root: Path, grace_s: float, keep_alive: Callable[[], object] | None = None, attempt: int | None = None
) -> list[int]:
    """Before an attempt launches: stop every process any earlier attempt of this job left running
    (a supervisor that died or froze; its torchrun is not our child). SIGTERM first, so the ranks
    checkpoint on their way out, SIGKILL after `grace_s`; returns the pids found. Never two attempts at once.
    `keep_alive` is called about once a second meanwhile (the new attempt's heartbeat)."""
    found = pids_of_run(run_root, attempt)
    if not found:
        return []
    signal_all(found, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    beat = 0.0
    while (left := pids_of_run(run_root, attempt)) and time.monotonic() < deadline:
        if keep_alive is not None and time.monotonic() - beat >= 1.0:
            keep_alive()
            beat = time.monotonic()
        time.sleep(0.2)
    deadline = time.monotonic() + 10.0
    while left and time.monotonic() < deadline:
        signal_all(left, signal.SIGCONT)  # a stopped process dies of SIGKILL anyway; SIGCONT lets it be reaped
        signal_all(left, signal.SIGKILL)
        time.sleep(0.1)
        left = pids_of_run(run_root, attempt)
    return found
