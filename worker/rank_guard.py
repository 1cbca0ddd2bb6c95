"""`python -m worker.rank_guard GRACE_S CMD...`: the parent of torchrun, between it and the worker.

Why: the worker must take its ranks with it when it dies (SIGKILL, OOM), but the kernel's
parent-death signal arrives once per thread of the dying worker that the child passes through, and
torchrun gives up waiting for its ranks on a second SIGTERM (the ranks then train on, unsupervised).
So the death signal (SIGUSR1, set on this process by the worker) comes here, and this process sends
torchrun exactly one SIGTERM, then SIGKILLs the whole group after the grace period.

It leads the job's process group: a cancel signals the group, which reaches torchrun directly; this
process ignores SIGTERM and exits as torchrun did (its exit code, or the same signal).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

DEATH_SIGNAL = signal.SIGUSR1


def main(argv: list[str]) -> int:
    grace_s, cmd = float(argv[0]), argv[1:]
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # torchrun, in our group, got the same signal
    child = subprocess.Popen(cmd, preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL))
    stopping = threading.Event()

    def supervisor_died(_signum: int, _frame: object) -> None:
        if stopping.is_set():
            return  # the same death, seen through another thread of the dead worker
        stopping.set()
        child.send_signal(signal.SIGTERM)  # torchrun forwards it: the ranks checkpoint and exit 75
        threading.Timer(grace_s, lambda: os.killpg(os.getpgrp(), signal.SIGKILL)).start()

    signal.signal(DEATH_SIGNAL, supervisor_died)
    code = child.wait()
    if code < 0:  # killed by a signal: die the same way, so the worker reads the same exit status
        if -code not in (signal.SIGKILL, signal.SIGSTOP):  # those two have no handler to reset (OSError)
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
