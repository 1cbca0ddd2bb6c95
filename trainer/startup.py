"""Start-up stamps: when each phase of a rank's start ended, in seconds since its process started.

The `started` event carries them (`startup`: imports, rendezvous, data, build) and the attempt's
first `progress` event adds `first_step_s`, so a slow start names its phase (bench/trainer_startup.py).
Torch-free.
"""

from __future__ import annotations

import os
import time

_IMPORTED = time.monotonic()


def process_age() -> float:
    """Seconds since this process was started: /proc/self/stat's start time (clock ticks since boot)
    against CLOCK_BOOTTIME; elsewhere, seconds since this module was imported."""
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        start_ticks = int(stat.rsplit(b")", 1)[1].split()[19])  # field 22, `starttime`
        return time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return time.monotonic() - _IMPORTED


class Startup:
    """Phase name → seconds since process start, in the order they were marked."""

    def __init__(self) -> None:
        self.marks: dict[str, float] = {}

    def mark(self, phase: str) -> float:
        self.marks[phase] = round(process_age(), 3)
        return self.marks[phase]
