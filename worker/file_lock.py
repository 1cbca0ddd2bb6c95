"""An exclusive file lock held across processes of one host, waited for while a job's heartbeat goes on.

One job unpacks a bundle (worker/bundles.py) or builds an environment (worker/environments/cache.py) while
others that need the same one wait; `tick` keeps each waiting job alive (its heartbeat) meanwhile.
"""

from __future__ import annotations

import contextlib
import fcntl
import time
from collections.abc import Callable, Iterator
from pathlib import Path


@contextlib.contextmanager
def held(path: Path, tick: Callable[[], None] = lambda: None, shared: bool = False) -> Iterator[None]:
    """Hold the lock on `path` (created if missing); while another process holds it, call `tick` and retry.
    `shared`: many holders at once, kept out only by an exclusive holder."""
    mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    with open(path, "a+b") as fh:
        while True:
            try:
                fcntl.flock(fh, mode | fcntl.LOCK_NB)
                break
            except BlockingIOError:  # another job makes the same thing: wait for it, alive
                tick()
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
