"""Which number of a job's lines is its step, learnt line by line (per job: the state is the job's).

A line's step, in this order:
- a counter named step / iter / update / global_step (`step 20`, `iter 10:`, `step=10`, `num_updates=100`,
  `step 00010/01000` with its total);
- epoch plus batch-in-epoch: an epoch (`epoch 1`, `Epoch 3/10`, `Train: 0 [..]`, `[1/25][10/469]`) and a
  progress fraction `N/M` of the batches (or samples) within it. M is the first one seen, and then stable
  (a sanity check's M before any epoch gives way to the first seen beside an epoch). The global step is the
  batches of the epochs before (M each; a run that prints no M: the most the epoch reached) plus N. A fraction with
  another M is another loop (validation): its values take the current step, named after its label (`Test/Loss`);
- an epoch alone, while no batch-in-epoch progress was ever seen (`Epoch 1, Loss: 0.5`, Keras, fastai);
- none: the values take the job's current step (the caller's fallback before any).

Counters are no series of their own (`epoch 1` on every line is the x axis, not a metric).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from core.console_reader.tokens import Fraction, Line, Pair

STEP_WORDS = frozenset(["step", "steps", "iter", "iters", "iteration", "iterations", "it", "update", "updates"])
EPOCH_WORDS = frozenset(["epoch", "epochs", "ep"])
BATCH_WORDS = frozenset(["batch", "batches", "batch_idx"])
_PHASES = frozenset(["train", "training", "val", "valid", "validation", "test", "eval"])
_NOT_COUNTER = frozenset(["max", "total", "warmup", "every", "per", "log", "save", "eval", "n", "num", "micro"])
_SPLIT = re.compile(r"[^a-z0-9]+")
MAX_STEP = 10**12


@lru_cache(maxsize=4096)  # a job's keys repeat on every line
def role(key: str | None) -> str | None:
    """ "step" / "epoch" / "batch" for a counter's key (`global_step`, `Train Epoch`, `Epoch(train)`,
    `num_updates`, `batches`), None for a value's (`max_steps`, `warmup_steps`, `loss`)."""
    if not key:
        return None
    words = [w for w in _SPLIT.split(key.lower()) if w]
    if not words:
        return None
    if words in (["num", "updates"], ["global", "step"], ["globalstep"]):
        return "step"
    if any(w in _NOT_COUNTER for w in words):
        return None
    for word in (words[-1], words[0] if all(w in _PHASES for w in words[1:]) else ""):
        if word in STEP_WORDS:
            return "step"
        if word in EPOCH_WORDS:
            return "epoch"
        if word in BATCH_WORDS:
            return "batch"
    return None


@dataclass(frozen=True)
class Seen:
    """What the tracker made of one line."""

    step: int | None  # the step of the line's values (None: no step known yet)
    counters: frozenset[str]  # keys that were counters (no series)
    label: str | None = None  # another loop's name (`Test`): its values are named `Test/<key>`
    own: bool = True  # the line said its step; False: the current one, a hint (a name's next point goes after
    # its last: stdout and stderr are read one after the other, so the counter may be ahead of this line)


def _int(p: Pair) -> int | None:
    return int(p.value) if p.integer and 0 <= p.value <= MAX_STEP else None


class StepTracker:
    def __init__(self) -> None:
        self.step: int | None = None  # the newest step (drives the job's progress)
        self.total: int | None = None
        self.epoch: int | None = None
        self.epochs: int | None = None  # the epochs' total when a line said it (`Epoch 3/10`)
        self.per_epoch: int | None = None  # M: batches (or samples) per epoch, once stable
        self._m_with_epoch = False
        self._offset = 0  # the global step where the current epoch's batches begin
        self._inner_max: int | None = None  # the most the current epoch's batch counter reached
        self._inner_min: int | None = None

    def observe(self, line: Line) -> Seen:
        # A whole number under a counter's name is the x axis, not a metric (`epoch 1 | step 20 | loss 0.5`).
        counters = {p.key for p in line.pairs if p.integer and role(p.key) is not None}
        step = self._explicit(line, counters)
        if step is not None:
            return self._at(step, counters)
        epoch, inner = self._epoch_and_inner(line, counters)
        if epoch is not None:
            self._enter_epoch(epoch)
        if inner is not None:
            return self._inner(inner, epoch, counters)
        if epoch is not None and self.per_epoch is None and self._inner_max is None:
            if self.epochs is not None:
                self.total = self.epochs
            return self._at(epoch, counters)  # the epoch is the step (no batches ever seen)
        return Seen(self.step, frozenset(counters), own=False)

    def _at(self, step: int, counters: set[str], label: str | None = None) -> Seen:
        self.step = step if self.step is None else max(self.step, step)
        return Seen(step, frozenset(counters), label)

    def _explicit(self, line: Line, counters: set[str]) -> int | None:
        for f in line.fractions:
            if role(f.key) == "step" and f.key is not None:
                counters.add(f.key)
                self.total = f.m if 0 < f.m <= MAX_STEP and f.m >= f.n else self.total
                return f.n if f.n <= MAX_STEP else None
        found = [(p, _int(p)) for p in line.pairs if role(p.key) == "step"]
        found = [(p, v) for p, v in found if v is not None]
        if not found:
            return None
        counters.update(p.key for p, _ in found)
        best = next((v for p, v in found if "global" in p.key.lower()), found[0][1])
        return best

    def _epoch_and_inner(self, line: Line, counters: set[str]) -> tuple[int | None, Fraction | None]:
        epoch: int | None = None
        for p in line.pairs:
            if role(p.key) == "epoch" and (v := _int(p)) is not None:
                epoch, _ = v, counters.add(p.key)
                break
        if epoch is None and line.outer is not None and (v := _int(line.outer)) is not None:
            epoch, _ = v, counters.add(line.outer.key)  # `Train: 0 [50/1251`
        plain = [f for f in line.fractions if f.key is None or role(f.key) in ("batch", "epoch")]
        for f in plain:
            if role(f.key) == "epoch":  # `Epoch 3/10`
                epoch, self.epochs = f.n, f.m
                plain = [g for g in plain if g is not f]
                break
        if epoch is None and len(plain) >= 2 and plain[0].key is None:  # `[1/25][10/469]`
            epoch, self.epochs = plain[0].n, plain[0].m
            plain = plain[1:]
        inner = plain[-1] if plain else None
        if inner is None:  # a fraction labelled otherwise (`Test: [10/196]`) is another loop's progress
            other = [f for f in line.fractions if f.key is not None and role(f.key) is None]
            inner = other[-1] if other else None
        return epoch, inner

    def _enter_epoch(self, epoch: int) -> None:
        if self.epoch is not None and epoch > self.epoch and self._inner_max is not None:
            per = self.per_epoch or (self._inner_max + (1 if self._inner_min == 0 else 0))
            self._offset += per * (epoch - self.epoch)
            self._inner_max = self._inner_min = None
        if self.epoch is None or epoch != self.epoch:
            self.epoch = epoch

    def _inner(self, f: Fraction, epoch: int | None, counters: set[str]) -> Seen:
        if f.key is not None and role(f.key) is not None:
            counters.add(f.key)
        with_epoch = epoch is not None or self.epoch is not None
        if f.m > 0 and (self.per_epoch is None or (with_epoch and not self._m_with_epoch and f.m != self.per_epoch)):
            # The first M is the loop's; one seen beside an epoch wins over one seen before any (a sanity check).
            self.per_epoch, self._m_with_epoch = f.m, with_epoch
        if self.per_epoch is None:
            return Seen(self.step, frozenset(counters), own=False)
        if f.m != self.per_epoch:  # another loop (validation): the current step, its own names
            label = f.key if f.leading and f.key is not None and role(f.key) is None else None
            return Seen(self.step, frozenset(counters), label, own=False)
        self._inner_max = f.n if self._inner_max is None else max(self._inner_max, f.n)
        self._inner_min = f.n if self._inner_min is None else min(self._inner_min, f.n)
        if self.epoch is None:
            self.total = self.per_epoch
            return self._at(f.n, counters)
        if self.epochs is not None:
            self.total = self.per_epoch * self.epochs
        return self._at(self._offset + f.n, counters)
