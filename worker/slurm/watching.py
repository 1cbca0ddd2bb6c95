"""What the Slurm agent reads of a job's run dir each period, as a worker's watcher does (worker/watch.py): events,
then TensorBoard scalars, then a script's console points, and each node's CPU/memory samples. The state it keeps per
job (`Watched`) is rebuilt from the row and the run dir after an agent restart; nothing is ingested twice."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.engine import Engine

from trainer.run_dir import RunDir, job_run_dir
from worker.console_feed import ConsoleFeed
from worker.ingest import Ingestor
from worker.ingest_events import EventTail
from worker.ingest_handlers import TimedMetric
from worker.slurm import rows
from worker.slurm.attempt_io import console_feed
from worker.slurm.samples import SampleTail
from worker.tensorboard import TensorBoardTail

TB_POINTS = 20_000  # TensorBoard scalars written per job per period (worker/watch.py TICK_POINTS)


@dataclass
class Watched:
    """What the agent holds in memory for a job (rebuilt from the row and the run dir after a restart)."""

    tail: EventTail
    ingestor: Ingestor
    attempt: int
    tensorboard: TensorBoardTail  # a script's TensorBoard scalars (worker/tensorboard.py), as a worker reads them
    console: ConsoleFeed | None  # a script's printed metrics, this attempt's rank 0 logs (worker/console_feed.py)
    samples: SampleTail  # this attempt's CPU/memory samples, written by each node (worker/slurm/samples.py)
    pending_tb: list[TimedMetric] = field(default_factory=list)


def ingest(engine: Engine, runs_dir: Path, watched: dict[int, Watched], row: rows.Row, final: bool = False) -> None:
    """What the ranks wrote since the last period, as a worker's watcher writes it (worker/watch.py): events,
    then TensorBoard scalars, then a script's console points (the SDK and TensorBoard win a name over the
    console). `final`: the attempt has ended (the console's held points and partial lines are written)."""
    w = watched.get(row.job_id)
    if w is None or w.attempt != row.attempt:
        run = RunDir(job_run_dir(runs_dir, row.job_id))
        tail = w.tail if w is not None else EventTail(run.events)
        tensorboard = w.tensorboard if w is not None else TensorBoardTail(run.tensorboard)
        ingestor = Ingestor(engine, row.job_id, run.root, attempt=row.attempt)
        feed = console_feed(run, row.attempt, row.spec)
        w = Watched(tail, ingestor, row.attempt, tensorboard, feed, SampleTail(run.attempt_logs(row.attempt)))
        watched[row.job_id] = w
    if w.console is not None:
        w.console.read()
    while batch := w.tail.read():
        if w.console is not None:
            w.console.claim(batch, ())
        w.ingestor.ingest(batch)
    # TensorBoard scalars: idempotent per name and step (a restarted agent re-reads the files from the start).
    # At most TB_POINTS a period per job, so one large folder never holds the other jobs' periods back.
    if len(w.pending_tb) < TB_POINTS:
        scalars = w.tensorboard.read()
        if w.console is not None:
            w.console.claim((), scalars)
        w.pending_tb.extend(scalars)
    w.pending_tb.extend(w.samples.read())
    if w.pending_tb:
        w.ingestor.ingest_metrics(w.pending_tb[:TB_POINTS])
        del w.pending_tb[:TB_POINTS]
    if w.console is not None:
        w.console.write(w.ingestor, final=final)
