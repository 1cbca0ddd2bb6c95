"""How a rank of the built-in trainer ends once the trainer has returned: at once, without the interpreter's teardown.

Why: once `train` returns (events closed, the final checkpoint written, the process group destroyed), what is
left are the C++ objects Python frees at exit — gloo's pairs and threads, which DDP's reducer keeps in reference
cycles until the interpreter's teardown, freed in no set order. Gloo aborts a rank (SIGABRT, exit 134) whose peer's
connection closes meanwhile, or waits on it: seen in CI as a rank aborting after the run finished (Slurm) and as a
2-node job still `running` minutes after its last step (torchrun). The interpreter's exit would also wait for
non-daemon threads (a checkpoint being written): so does this. Only for the built-in trainer: a script's exit
hooks (the SDK's, the user's) must run. Standard library only: the Slurm rank imports it before anything heavy.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading


def exit_now(code: int) -> None:
    """Wait for the process's other non-daemon threads, flush stdout and stderr, and end with `code`."""
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)
