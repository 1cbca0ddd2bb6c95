"""`python -m worker.sandbox_guard FD GRACE_S CMD...`: the rank guard (worker/rank_guard.py) inside a
job's sandbox, told of the worker's death by a pipe instead of the parent-death signal.

Why: the kernel's parent-death signal goes to the worker's direct child, bwrap, which cannot pass it on.
The worker holds the write end of a pipe whose read end is FD here; when the worker dies the pipe
reads end-of-file, and this process sends itself the signal rank_guard takes as "the supervisor died"
(torchrun gets one SIGTERM, the ranks checkpoint; everything is SIGKILLed after the grace period).
"""

from __future__ import annotations

import os
import sys
import threading

from worker import rank_guard


def _watch(fd: int) -> None:
    while True:
        try:
            if not os.read(fd, 4096):
                break
        except InterruptedError:
            continue
        except OSError:
            break
    os.kill(os.getpid(), rank_guard.DEATH_SIGNAL)


def main(argv: list[str]) -> int:
    fd = int(argv[0])
    threading.Thread(target=_watch, args=(fd,), daemon=True, name="supervisor-watch").start()
    return rank_guard.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
