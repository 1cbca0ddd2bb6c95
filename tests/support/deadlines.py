"""Deadlines of the tests' waits: the last resort, never the mechanism.

Every wait returns as soon as its event happens (a row written, a host registered, a file's size); its
deadline only bounds how long a broken run takes to fail. On a loaded machine (several xdist workers on two
cores, a CPU burner beside them) the same events simply come later, so each deadline is
`seconds × RANKZERO_TEST_DEADLINE_SCALE` (1 by default; `make test` sets 3): far beyond the slowest run seen,
without making a passing run any slower.
"""

from __future__ import annotations

import os
import time

SCALE_ENV = "RANKZERO_TEST_DEADLINE_SCALE"


def scale() -> float:
    try:
        return max(1.0, float(os.environ.get(SCALE_ENV, "1")))
    except ValueError:
        return 1.0


def seconds(s: float) -> float:
    """`s` seconds of waiting, scaled for the machine's load."""
    return s * scale()


def deadline_in(s: float) -> float:
    """The `time.monotonic()` value after which a wait of `s` (scaled) seconds gives up."""
    return time.monotonic() + seconds(s)
