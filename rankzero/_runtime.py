"""The process's view of the job: its rank, the job environment, and (rank 0 only) the event log.

One `EventLog` per process, opened on first use and closed at exit (everything queued is written).
"""

from __future__ import annotations

import atexit
import os
import sys
import threading

import torch.distributed as dist

from rankzero import _crash, env
from trainer.events import EventLog
from trainer.rank_progress import RankProgress
from trainer.run_dir import RunDir

# The writer wakes at most this often (events reach the file within about this long): a wake-up per
# event, with an event every step, takes the GIL from the training loop often enough to show.
WRITER_LINGER_S = 0.25

_lock = threading.Lock()
_job: env.JobEnv | None = None
_events: EventLog | None = None
_rank_progress: RankProgress | None = None  # every rank's own record (issue 38)
_noticed_local = False
# How long the exit hooks may spend writing what is queued after a crash (the traceback is already out;
# the worker must see the rank's exit at once, not after a wait on peers that may be gone).
CRASH_WRITE_S = 1.0
crashed = _crash.crashed


def initialized() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    """This process's global rank: the process group's, else torchrun's RANK, else 0."""
    return dist.get_rank() if initialized() else int(os.environ.get("RANK", "0"))


def world_size() -> int:
    """The number of ranks that take part in collectives: 1 until the process group exists."""
    return dist.get_world_size() if initialized() else 1


def job() -> env.JobEnv:
    """The job environment, read once."""
    global _job
    if _job is None:
        _job = env.read()
        _crash.watch_for_crash()
    return _job


def events() -> EventLog | None:
    """Rank 0's event log in the service; None on other ranks and in local mode."""
    global _events
    if _events is not None:
        return _events
    run_dir = job().run_dir
    if run_dir is None:  # local mode
        notice_local()
        return None
    if rank() != 0:
        return None
    with _lock:
        if _events is None:
            _events = EventLog(RunDir(run_dir).events, enabled=True, linger_s=WRITER_LINGER_S)
            atexit.register(close)
    return _events


def rank_progress() -> RankProgress | None:
    """This rank's progress record in the service (any rank; trainer/rank_progress.py); None in local mode."""
    global _rank_progress
    if _rank_progress is not None:
        return _rank_progress
    run_dir = job().run_dir
    if run_dir is None:
        return None
    with _lock:
        if _rank_progress is None:
            _rank_progress = RankProgress(RunDir(run_dir).ranks, rank()).start()
            atexit.register(_rank_progress.close)
    return _rank_progress


def notice_local() -> None:
    """Say once, on rank 0, that nothing is recorded outside the service."""
    global _noticed_local
    if _noticed_local:
        return
    _noticed_local = True
    if rank() == 0:
        print(
            f"rankzero: {env.RUN_DIR} is not set (running outside the service): log, progress and "
            "save_checkpoint record nothing, load_checkpoint returns None",
            file=sys.stderr,
        )


def close() -> None:
    """Write every queued event and close the log (at exit; safe to call twice). After a crash it
    writes for at most CRASH_WRITE_S and never joins the writer: a queued metric block may wait on an
    all-reduce whose peers are gone, and the crash must surface now (the writer is a daemon thread)."""
    global _events
    with _lock:
        log, _events = _events, None
    if log is None:
        return
    if _crash.crashed():
        log.flush(timeout=CRASH_WRITE_S)
        return
    log.close()


def reset() -> None:
    """Forget the job environment and close the log (tests that change the environment in-process)."""
    global _job, _noticed_local, _rank_progress
    close()
    if _rank_progress is not None:
        _rank_progress.close()
    _job, _noticed_local, _rank_progress = None, False, None
    _crash.forget()
