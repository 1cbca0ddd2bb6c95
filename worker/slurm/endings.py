"""How a Slurm job ends for rankzero, pure: the sbatch values a spec asks for (nice, GPUs per node), whether
an attempt stopped resumably, and the status, words and error columns of an attempt Slurm says has ended."""

from __future__ import annotations

from core.settings import Settings
from core.tables import JobStatus
from trainer.spec import JobSpec
from worker import errors
from worker.slurm.states import Phase, Reading

S = JobStatus


def nice_for(priority: int) -> int:
    """rankzero priority (−1000..1000) → sbatch --nice (0..2000; higher priority, lower nice)."""
    return max(0, min(2000, 1000 - priority))


def gpus_per_node(spec: JobSpec, settings: Settings) -> int:
    per_rank = settings.slurm_gpus_per_rank
    if spec.device == "cuda":
        per_rank = max(1, per_rank)
    elif spec.device == "cpu":
        per_rank = 0
    return per_rank * spec.nproc


def ending(reading: Reading, *, finished: bool, script: bool, hole: str | None,
           failure: errors.Failure | None, exit_code: int | None) -> tuple[JobStatus, str, dict]:  # fmt: skip
    """How an attempt Slurm says has ended ends the job: (status, timeline words, error columns). A
    success is only what the trainer vouches for (`finished`, a whole record); a script's, its exit 0.

    The trainer's word wins over a rank's exit status after it: a built-in run that wrote `finished` with a
    whole record (its final checkpoint and every event on disk) succeeds even when Slurm says FAILED because a
    rank died in process-group teardown afterwards (seen under load: gloo aborts a rank whose peer exited
    first, exit 134), as a worker's run does (worker/supervise.py); the exit code stays on the row."""
    if reading.status is S.failed and finished and not script and hole is None:
        words = f"{reading.words}, after the trainer finished (a rank died in process-group teardown)"
        return S.succeeded, words, {"exit_code": exit_code, "eta_s": 0.0}
    if reading.status is S.succeeded:
        if exit_code not in (None, 0):
            reading = Reading(Phase.ended, f"{reading.words} (exit code {exit_code})", S.failed)
        elif not script and not finished:
            hole = hole or "the trainer wrote no `finished` event"
        if reading.status is S.succeeded and hole is None:
            return S.succeeded, reading.words, {"exit_code": 0, "eta_s": 0.0}
        if reading.status is S.succeeded:
            return S.failed, f"{reading.words}, but its record is not whole", {"error": hole, "exit_code": exit_code}
    if reading.status is S.cancelled:
        return S.cancelled, reading.words, {"exit_code": exit_code}
    error = failure.text() if failure is not None else reading.words
    if failure is not None and failure.rank is None:
        error = f"{reading.words}\n{error}"
    cols = {"error": error[:20000], "exit_code": exit_code, "failed_rank": failure.rank if failure else None}
    return S.failed, reading.words, cols


def stopped_resumably(events: list[dict]) -> bool:
    """Did the run's last attempt end with the trainer's `stopped` event (a checkpoint, exit 75)?"""
    for event in reversed(events):
        kind = event.get("type")
        if kind in ("stopped", "finished", "failed", "started"):
            return kind == "stopped"
    return False
