"""Why a Slurm job's ranks stopped, and what follows: pure, from what `scontrol show job` says of the job at the
moment its ranks exited 75 (checkpointed on a stop signal) to a `Cause`.

The site's word is final (issue 39): only a preemption and a time-limit warning make the batch script requeue its
own job; `scontrol requeue` is Slurm's own requeue (the script adds nothing); a `scancel` (any signal, `--full`), or
a stop signal that is neither (`scancel --signal=TERM` while nothing preempts it) ends the job, never requeued.
What `scontrol show job` says at that moment (seen on Slurm 22.05):
- scancel (also `--signal=KILL --full`): JobState=COMPLETING, Restarts unchanged;
- scontrol requeue: JobState=COMPLETING, Restarts already one more than the batch step's SLURM_RESTART_COUNT;
- preemption within GraceTime: JobState=RUNNING, PreemptTime set (reset by a requeue);
- the time-limit warning (`--signal=USR1@margin`): JobState=RUNNING, TimeLimit − RunTime ≤ margin (+ slurmctld's
  30 s check period and up to 60 s early signal).
A node failure leaves no record: the batch step died with its node. Torch- and database-free: the batch step
imports it (worker/slurm/stopped.py) within Slurm's KillWait.
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass
from pathlib import Path

# A stop whose remaining time is within the margin plus this is the time-limit warning: slurmctld checks limits
# every 30 s and may signal up to 60 s early.
LIMIT_SLACK_S = 90


class Cause(enum.Enum):
    preempted = "preempted"
    time_limit = "time limit"
    requeued = "scontrol requeue"
    node_failure = "node failure"
    cancelled = "scancel"
    signalled = "stop signal"
    rankzero = "rankzero cancel"


# Causes after which the batch script requeues its own job (Slurm does not: GraceTime, a --signal warning).
SCRIPT_REQUEUES = frozenset({Cause.preempted, Cause.time_limit})
# Causes after which the job goes on (Slurm requeued it, or the script did, or the agent resubmits it).
RESUMES = frozenset({Cause.preempted, Cause.time_limit, Cause.requeued, Cause.node_failure})


@dataclass(frozen=True)
class ShownJob:
    """The fields of `scontrol show job -o` that tell a stop's cause."""

    state: str  # JobState (COMPLETING hides the base state: a cancel or a requeue in progress)
    restarts: int
    preempt_time: str = "None"
    run_s: int | None = None
    limit_s: int | None = None  # None: UNLIMITED
    partition: str = ""


_FIELD = re.compile(r"(?:^|\s)(JobState|Restarts|PreemptTime|RunTime|TimeLimit|Partition)=(\S*)")


def duration_s(text: str) -> int | None:
    """Slurm's `[D-]HH:MM:SS` (or MM:SS, or minutes) in seconds; None for UNLIMITED or anything unreadable."""
    found = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+)(?::(\d+))?", text.strip())
    if not found:
        return None
    days, a, b, c = found.groups()
    if c is None and a is None:  # minutes alone
        return int(b) * 60 + int(days or 0) * 86400
    h, m, s = (int(a or 0), int(b), int(c)) if c is not None else (0, int(a), int(b))
    return ((int(days or 0) * 24 + h) * 60 + m) * 60 + s


def parse_show_job(text: str) -> ShownJob:
    """`scontrol show job -o ID` (one line of Key=Value) → ShownJob (ValueError when it names no JobState)."""
    fields = dict(_FIELD.findall(text))
    if "JobState" not in fields:
        raise ValueError(f"scontrol show job printed no JobState: {text.strip()[:200]!r}")
    restarts = fields.get("Restarts", "0")
    return ShownJob(
        state=fields["JobState"].upper(),
        restarts=int(restarts) if restarts.isdigit() else 0,
        preempt_time=fields.get("PreemptTime", "None"),
        run_s=duration_s(fields.get("RunTime", "")),
        limit_s=duration_s(fields.get("TimeLimit", "")),
        partition=fields.get("Partition", ""),
    )


def cause_of(job: ShownJob, restart: int, margin_s: int, cancel_marked: bool) -> Cause:
    """Why the ranks of restart `restart` (the batch step's SLURM_RESTART_COUNT) stopped, as Slurm shows `job`
    then; `cancel_marked`: rankzero asked for the cancel (its marker file is in the run dir)."""
    if cancel_marked:
        return Cause.rankzero
    if job.restarts > restart:  # Slurm requeued it already: an admin's `scontrol requeue`, or a preemption's
        return Cause.preempted if job.preempt_time not in ("", "None") else Cause.requeued
    if job.state in ("COMPLETING", "CANCELLED"):
        return Cause.cancelled
    if job.state == "TIMEOUT":
        return Cause.time_limit
    if job.preempt_time not in ("", "None") or job.state == "PREEMPTED":
        return Cause.preempted
    if job.limit_s is not None and job.run_s is not None and job.limit_s - job.run_s <= margin_s + LIMIT_SLACK_S:
        return Cause.time_limit
    return Cause.signalled


def requeue_words(cause: Cause | None, partition: str = "", unseen: bool = False) -> str:
    """What a requeue was, in the job's timeline. `unseen`: the batch step left no stop record (it died with its
    node, or was killed before its ranks exited), and `cause` is what the agent saw Slurm say, if anything."""
    where = f" in partition {partition}" if partition else ""
    if unseen:
        return {
            Cause.node_failure: "requeued by Slurm after a node failure",
            Cause.preempted: f"preempted{where} and requeued by Slurm before its ranks could checkpoint",
        }.get(cause or Cause.signalled, "requeued by Slurm; its batch step left no record of why (a node failure, "
              "or a requeue that killed the ranks before they checkpointed)")  # fmt: skip
    return {
        Cause.preempted: f"preempted{where} (checkpointed on Slurm's warning, requeued)",
        Cause.time_limit: "its time limit was near (checkpointed on Slurm's warning, requeued)",
        Cause.requeued: "requeued by an administrator (scontrol requeue)",
        Cause.node_failure: "requeued by Slurm after a node failure",
    }.get(cause or Cause.node_failure, f"requeued by Slurm ({cause.value if cause else '?'})")


def stop_words(cause: Cause) -> str:
    """What the batch step says (and an ended job's timeline) of a stop that ends the job."""
    return {
        Cause.cancelled: "cancelled by Slurm (scancel)",
        Cause.signalled: "stopped by a signal from outside rankzero (scancel --signal), neither a preemption nor "
        "its time limit: not requeued",
        Cause.rankzero: "cancelled from rankzero",
    }.get(cause) or requeue_words(cause)


def record_path(run_root: Path, slurm_job_id: str, restart: int) -> Path:
    """The batch step's record of why restart `restart` of Slurm job `slurm_job_id` stopped."""
    return run_root / f"slurm_stop_{slurm_job_id}_{int(restart)}.json"


def read_record(run_root: Path, slurm_job_id: str, restart: int) -> tuple[Cause, str] | None:
    """(cause, partition) of the record, or None (none written: a node failure, or the ranks did not stop on a
    signal)."""
    try:
        data = json.loads(record_path(run_root, slurm_job_id, restart).read_text())
        return Cause(data["cause"]), str(data.get("partition") or "")
    except (OSError, ValueError, KeyError, TypeError):
        return None


def resubmits(final_state: str, recorded: Cause | None, stopped_resumably: bool, cancel_requested: bool) -> bool:
    """Does the agent submit an ended job again? Only a job Slurm stopped for a reason that resumes (a preemption
    or time limit whose requeue Slurm refused, a node failure it did not requeue) and whose ranks checkpointed on
    the stop. Never one cancelled (by rankzero or by Slurm, pending or running), or stopped by an outside signal."""
    if cancel_requested or not stopped_resumably:
        return False
    state = final_state.split()[0].rstrip("+").upper() if final_state.strip() else ""
    if state == "CANCELLED":
        return False
    if state in ("PREEMPTED", "NODE_FAIL", "BOOT_FAIL"):
        return True
    return recorded in (Cause.preempted, Cause.time_limit)
