"""`rankzero.progress`: where the run is and when it will end, as `progress` events on rank 0.

Rates are measured between the events written: at most one every `MIN_INTERVAL_S` (the first call
and the call that reaches `total_steps` always write), so a script may call it every step.
"""

from __future__ import annotations

import operator
import time
from dataclasses import dataclass

from rankzero import _runtime
from trainer.event_types import EventType, Progress

MIN_INTERVAL_S = 0.5


@dataclass
class _Mark:
    time: float
    step: int
    samples: int | None


_last: _Mark | None = None


def _rates(now: _Mark, last: _Mark | None, total_steps: int) -> Progress:
    """samples_per_s (when samples are counted) and eta_s from the interval since the last event."""
    if last is None or now.time <= last.time or now.step <= last.step:
        return {}
    elapsed = now.time - last.time
    steps_per_s = (now.step - last.step) / elapsed
    rates: Progress = {"eta_s": max(total_steps - now.step, 0) / steps_per_s}
    if now.samples is not None and last.samples is not None:
        rates["samples_per_s"] = (now.samples - last.samples) / elapsed
    return rates


def progress(step: int, total_steps: int, *, epoch: int | None = None, samples: int | None = None) -> None:
    """Report that `step` of `total_steps` is done (every rank should call it: each rank's last step and
    step time are kept, so the job page says which rank is stuck or slow; rank 0 writes the events).

    `samples`: samples seen so far by all ranks together (e.g. step × global batch size), which
    gives the UI a samples/s figure; `epoch` is shown as given. ETA comes from the step rate.
    """
    global _last
    step, total_steps = operator.index(step), operator.index(total_steps)
    ranks = _runtime.rank_progress()
    if ranks is not None:  # every rank's own record: which rank is stuck or slow (trainer/rank_progress.py)
        ranks.step_done(step)
    events = _runtime.events()
    if events is None:
        return
    now = _Mark(time.monotonic(), step, None if samples is None else operator.index(samples))
    if _last is not None and step < total_steps and now.time - _last.time < MIN_INTERVAL_S:
        return
    fields: Progress = {"step": step, "total_steps": total_steps}
    if epoch is not None:
        fields["epoch"] = operator.index(epoch)
    if now.samples is not None:
        fields["samples"] = now.samples
    fields.update(_rates(now, _last, total_steps))
    events.emit(EventType.progress, **fields)
    _last = now
