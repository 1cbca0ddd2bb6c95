"""`rankzero.rank_work()`: mark this rank's own work in a step, so the service can tell which rank is slow.

Under collectives every rank's wall time per step is the slowest rank's (the others wait for it in the
all-reduce), so step times alone cannot name the straggler. The time a rank spends inside `rank_work`
(loading its batch, its forward pass: what no peer waits on) can: the job page scores each rank's median
against the median rank (core/rank_health.py). Where a rank hangs inside it while its peers wait, the
stall report names that rank. Outside the service it does nothing.

    for step in range(steps):
        with rankzero.rank_work():
            batch = next(batches)
            loss = model(batch)
        loss.backward()          # DDP's all-reduce: the ranks wait for each other here
        optimizer.step()
        rankzero.progress(step + 1, steps)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from rankzero import _runtime


@contextlib.contextmanager
def rank_work() -> Iterator[None]:
    """The block is this rank's own work of a step (any rank; a no-op in local mode)."""
    ranks = _runtime.rank_progress()
    if ranks is None:
        yield
        return
    with ranks.work():
        yield
