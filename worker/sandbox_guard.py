"""`python -m worker.sandbox_guard FD GRACE_S CMD...`: the rank guard (worker/rank_guard.py) inside a
job's sandbox, as the init (pid 1) of its pid namespace, told of the worker's death by a pipe instead
of the parent-death signal.

Why a pipe: the kernel's parent-death signal goes to the worker's direct child, bwrap, which cannot
pass it on. The worker holds the write end of a pipe whose read end is FD here; when the worker dies
the pipe reads end-of-file, and this process sends itself the signal rank_guard takes as "the
supervisor died" (torchrun gets one SIGTERM, the ranks checkpoint; all is SIGKILLed after the grace).

Why pid 1: when it exits the kernel kills everything left in the namespace (escaped processes too).
An init also inherits every orphan: those that exit are reaped here, so zombies never pile up.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from pathlib import Path

from worker import rank_guard, sandbox_ids


def _watch(fd: int) -> None:
    while True:
        try:
            if not os.read(fd, 4096):
                break
        except InterruptedError:
            continue
        except OSError:
            break
    # An init ignores a signal it has no handler for: wait for rank_guard's (set right after torchrun starts).
    while not callable(signal.getsignal(rank_guard.DEATH_SIGNAL)):
        time.sleep(0.05)
    os.kill(os.getpid(), rank_guard.DEATH_SIGNAL)


def _children() -> list[tuple[int, int, str]]:
    """(start time, pid, state) of this process's children."""
    me = str(os.getpid())
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if fields[1] == me:
                    found.append((int(fields[19]), int(entry.name), fields[0]))
    return sorted(found)


def _reap_orphans() -> None:
    """Reap exited orphans, never torchrun (the first child: rank_guard's Popen waits for it)."""
    while True:
        time.sleep(1.0)
        for _, pid, state in _children()[1:]:
            if state == "Z":
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)


def main(argv: list[str]) -> int:
    sandbox_ids.drop_from_env()  # a root worker's job: its ids before anything else (issue 34)
    fd = int(argv[0])
    threading.Thread(target=_watch, args=(fd,), daemon=True, name="supervisor-watch").start()
    if os.getpid() == 1:
        threading.Thread(target=_reap_orphans, daemon=True, name="orphan-reaper").start()
    code = rank_guard.main(argv[1:])
    # rank_guard dies of torchrun's signal; an init cannot: exit as a shell (and bwrap) says it, 128 + N.
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
