"""Node 0's look at every rank (issue 38): their progress records on the job row while the attempt runs, and,
when the stall watchdog fires, which rank(s) hung and their Python stacks, before the ranks are stopped.

The records are the ranks' own files (trainer/rank_progress.py), this attempt's only; the decisions are
core/rank_health.py's; the stacks are py-spy's (worker/rank_stacks.py). Nothing here may fail the
attempt's outcome: a report that cannot be made leaves the watchdog's note as it was.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sqlalchemy import update
from sqlalchemy.engine import Engine

from core import rank_health
from core.rank_health import RankSeen
from core.tables import Job
from trainer.rank_progress import read_all
from worker import procs, rank_stacks
from worker.attempt import Attempt

log = logging.getLogger("rankzero.worker")
WRITE_EVERY_S = 5.0  # the job row's copy of the records: at most this often, and only when they changed (display only)
MAX_DUMPS = 8  # ranks whose stacks one stall takes (each py-spy dump pauses a rank for a moment)
HUNG_WORDS = "a rank hung"  # worker/stop_reason.py `stall_note`'s last words, replaced by the ranks named


def records(a: Attempt) -> dict[int, RankSeen]:
    """This attempt's ranks' records (an earlier attempt's files may still lie in the run dir)."""
    seen = {}
    for rank, record in read_all(a.run.ranks, a.run.root).items():
        try:
            one = RankSeen.of(record)
        except (TypeError, ValueError):
            continue
        if one.attempt in (None, a.number):
            seen[rank] = one
    return seen


def _write(engine: Engine, job_id: int, attempt: int, **values: Any) -> None:
    with engine.begin() as conn:
        conn.execute(update(Job).where(Job.id == job_id, Job.attempt == attempt).values(**values))  # type: ignore[arg-type]


class RankWatch:
    """Copies the ranks' records onto the job row (`rank_progress`) when they change, every WRITE_EVERY_S."""

    def __init__(self, a: Attempt) -> None:
        self.a = a
        self.due = 0.0
        self.written: list[dict[str, Any]] | None = None

    def poll(self, now: float) -> None:
        """Read the records and write them when due and changed (a database error propagates: the caller's)."""
        if now < self.due:
            return
        self.due = now + WRITE_EVERY_S
        ranks = [r.public() for r in sorted(records(self.a).values(), key=lambda r: r.rank)]
        if not ranks or ranks == self.written:
            return
        _write(self.a.engine, self.a.job_id, self.a.number,
               rank_progress={"attempt": self.a.number, "at": time.time(), "ranks": ranks})  # fmt: skip
        self.written = ranks


def final(watch: RankWatch) -> None:
    """The records as the ranks left them (their last write comes at exit, after the last poll)."""
    try:
        watch.due = 0.0
        watch.poll(time.monotonic())
    except Exception:  # a summary: never the attempt's outcome
        log.exception("job %s attempt %s: writing the ranks' last progress failed", watch.a.job_id, watch.a.number)


def on_stall(a: Attempt, note: str) -> str:
    """Name the rank(s) that hung in the watchdog's `note`, keeping their stacks on the job (`stuck_ranks`);
    the note unchanged where no report could be made."""
    try:
        return _report(a, note)
    except Exception:  # the stall is handled all the same: the ranks are stopped, the note says a rank hung
        log.exception("job %s attempt %s: the stuck-rank report failed", a.job_id, a.number)
        return note


def _report(a: Attempt, note: str) -> str:
    seen = records(a)
    stuck = rank_health.stuck_ranks(seen, a.layout.nproc * a.layout.nnodes)
    pids = procs.rank_pids(a.mark)
    named = stuck.ranks if stuck.how not in ("all", "unknown") else tuple(sorted(pids))
    stacks: dict[int, str] = {}
    unavailable: dict[int, str] = {}
    here = [rank for rank in named[:MAX_DUMPS] if rank in pids]
    for rank in named[:MAX_DUMPS]:
        if rank not in pids:
            unavailable[rank] = f"rank {rank} runs on another node (or has exited): its stacks are not taken"
    # Side by side: the ranks are stopped after, so the dumps together take one dump's time, not N.
    with ThreadPoolExecutor(max_workers=max(len(here), 1), thread_name_prefix="py-spy") as pool:
        dumps = dict(zip(here, pool.map(lambda rank: rank_stacks.dump(pids[rank], rank), here), strict=True))
    for rank, dumped in dumps.items():
        if dumped.text is not None:
            stacks[rank] = dumped.text
        else:
            unavailable[rank] = dumped.unavailable or "no stacks"
    stuck = rank_health.refine(stuck, stacks)
    sentence = stuck.sentence(seen)
    _write(a.engine, a.job_id, a.number, stuck_ranks={
        "attempt": a.number,
        "at": time.time(),
        "ranks": list(stuck.ranks),
        "waiting": list(stuck.waiting),
        "how": stuck.how,
        "sentence": sentence,
        "stacks": {str(r): text for r, text in stacks.items()},  # the waiting ranks' too, where dumped
        "unavailable": {str(r): why for r, why in unavailable.items()},
        "ranks_seen": [r.public() for r in sorted(seen.values(), key=lambda r: r.rank)],
    })  # fmt: skip
    log.warning("job %s attempt %s: stall: %s", a.job_id, a.number, sentence)
    if not stuck.ranks:  # no rank to name (a start-up that never ended): the stacks are kept, the note stands
        return note
    if note.endswith(HUNG_WORDS):
        return note[: -len(HUNG_WORDS)] + sentence
    return f"{note}; {sentence}"
