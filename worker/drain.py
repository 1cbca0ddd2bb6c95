"""Graceful worker shutdown (a deploy): the Celery main process raises a flag file, every supervisor
in its pool sees it, stops its ranks with SIGTERM (they checkpoint) and hands the job back to the queue.

A flag names its process by pid *and* start time (`<pid>-<start ticks>`), so a flag left behind by a
worker that was killed never applies to a later process that happens to get the same pid; stale
flags are swept when a worker starts.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from core.settings import Settings

log = logging.getLogger("rankzero.worker")


def _start_ticks(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat field 22); None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: count fields after its last ')'.
    return stat.rsplit(")", 1)[1].split()[19]


def _flags_dir(settings: Settings) -> Path:
    return settings.data_dir / "drain"


def _flag(settings: Settings, pid: int) -> Path | None:
    ticks = _start_ticks(pid)
    return None if ticks is None else _flags_dir(settings) / f"{pid}-{ticks}"


def request_drain(settings: Settings) -> None:
    path = _flag(settings, os.getpid())
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()


def clear_drain(settings: Settings) -> None:
    """Remove this process's flag and every flag whose process is gone (or is another process now)."""
    _sweep(settings, keep_own=False)


def sweep_dead_flags(settings: Settings) -> None:
    """Remove the flags of workers that are gone and were never restarted (a worker's start sweeps them
    too, but a host whose workers never come back would keep them): run every heartbeat by the host watch."""
    _sweep(settings, keep_own=True)


def _sweep(settings: Settings, keep_own: bool) -> None:
    directory = _flags_dir(settings)
    if not directory.is_dir():
        return
    for entry in directory.iterdir():
        pid, _, ticks = entry.name.partition("-")
        alive = pid.isdigit() and _start_ticks(int(pid)) == ticks
        if alive and (keep_own or int(pid) != os.getpid()):
            continue
        try:
            entry.unlink()
        except IsADirectoryError:
            log.warning("unexpected directory among drain flags, left alone: %s", entry)
        except OSError:
            continue  # another worker swept it first


def draining(settings: Settings) -> bool:
    """True when this process (solo/threads pool) or its parent (prefork pool) is shutting down."""
    flags = (_own_flag(settings, os.getpid()), _own_flag(settings, os.getppid()))
    return any(flag is not None and flag.is_file() for flag in flags)


_own_flags: dict[tuple[Path, int], Path | None] = {}  # (data dir, pid) → its flag's path


def _own_flag(settings: Settings, pid: int) -> Path | None:
    """`_flag` of this process or its parent, read from /proc once: every supervisor asks at each tick
    (issue 29, the worker's CPU), and neither pid can name another process while it is ours (a new
    parent is a new pid, so a new key)."""
    key = (settings.data_dir, pid)
    if _own_flags.get(key) is None:
        _own_flags[key] = _flag(settings, pid)
    return _own_flags[key]


# --- an operator's drain of this host (`rankzero hosts drain`; worker/host_watch.py raises the flag) ---


def _host_flag(settings: Settings) -> Path:
    # Beside the process flags, not among them: a worker's start sweeps those, and several hosts' workers
    # may share one data dir (one machine posing as several hosts).
    return settings.data_dir / "drain-hosts" / settings.resolved_host_name


def set_host_drained(settings: Settings, drained: bool) -> None:
    """Raise or lower this host's drain flag (the host row says; the supervisors read the file)."""
    path = _host_flag(settings)
    if drained:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    else:
        path.unlink(missing_ok=True)


def host_drained(settings: Settings) -> bool:
    """True while an operator has drained this host: its supervisors hand their jobs back (checkpointed)."""
    return _host_flag(settings).is_file()


def why(settings: Settings) -> str:
    """Why this worker's supervisors hand their jobs back, in the words of the job's timeline."""
    if host_drained(settings):
        return f"host {settings.resolved_host_name} drained by an operator (rankzero hosts drain)"
    return f"worker shutting down (on {settings.resolved_host_name})"
