"""Stopping a job's processes: SIGTERM (the trainer checkpoints and exits 75), a grace period, SIGKILL."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

from worker.procs import pids_with_mark, signal_all


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
