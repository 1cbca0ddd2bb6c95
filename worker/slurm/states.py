"""What a Slurm job's state means for its rankzero job: pure, from one line of `squeue` (or `sacct`) to
a `Reading` — the phase, the rankzero state it implies, and the words a user reads.

Every state Slurm reports is mapped; an unknown one reads as "still active, unknown state" (never as
finished), and a job Slurm no longer lists is `unknown`, never gone (the agent asks `sacct`, then waits).
Requeues are told apart by the restart count: restart r runs rankzero attempt `first_attempt + r`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from core.backends import BackendStatus
from core.tables import JobStatus


@dataclass(frozen=True)
class SlurmJob:
    """One job as `squeue -O` / `sacct -P` reports it (strings as Slurm prints them)."""

    job_id: str
    state: str  # PENDING, RUNNING, ... (sacct may add " by 0": only the first word counts)
    reason: str = "None"
    nodes: str = ""
    partition: str = ""
    restarts: int = 0
    start_time: str = ""  # pending: the expected or earliest start (BeginTime after a requeue)
    exit_code: int | None = None  # the batch step's exit status (sacct "3:0" → 3; squeue's wait status → 3)
    by: str = ""  # who cancelled it, where Slurm says (sacct's "CANCELLED by 1000", as a user name)
    user: str = ""  # whose job it is (squeue's UserName): the Unix user a mapped job was submitted as


class Phase(enum.Enum):
    pending = "pending"  # waiting in Slurm's queue (rankzero: starting, with Slurm's reason)
    running = "running"  # ranks running (rankzero: running)
    ended = "ended"  # Slurm is done with it: `status` says how
    unknown = "unknown"  # Slurm does not list it (now): keep the job as it is, ask again


@dataclass(frozen=True)
class Reading:
    phase: Phase
    words: str
    status: JobStatus | None = None  # for `ended`: succeeded (if the run's record agrees), failed, cancelled


# Pending reasons in words (squeue's REASON column); any other is shown as Slurm says it.
REASON_WORDS: dict[str, str] = {
    "Resources": "waiting for resources in partition {partition}",
    "Priority": "waiting behind higher-priority jobs in partition {partition}",
    "BeginTime": "waiting for its begin time{eligible}",
    "Dependency": "waiting for a job it depends on",
    "JobHeldUser": "held by its user (scontrol release)",
    "JobHeldAdmin": "held by an administrator",
    "QOSMaxJobsPerUserLimit": "waiting: the QOS allows no more jobs of this user now",
    "QOSMaxCpuPerUserLimit": "waiting: the QOS allows no more CPUs for this user now",
    "QOSMaxGRESPerUser": "waiting: the QOS allows no more GPUs for this user now",
    "AssocGrpGRES": "waiting: the account's GPU limit is reached",
    "AssocMaxJobsLimit": "waiting: the account's job limit is reached",
    "PartitionTimeLimit": "its time limit exceeds partition {partition}'s: it will never start",
    "PartitionNodeLimit": "it asks for more nodes than partition {partition} allows: it will never start",
    "ReqNodeNotAvail": "waiting: a node it needs is unavailable (down, drained or reserved)",
    "PartitionDown": "waiting: partition {partition} is down",
    "Reservation": "waiting for its reservation",
    "launch failed requeued held": "held after a failed launch (an administrator must release it)",
}
# States in which Slurm is still working on the job.
PENDING_STATES = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESV_DEL_HOLD",
                            "SPECIAL_EXIT", "RESIZING"})  # fmt: skip
RUNNING_STATES = frozenset({"RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING", "SUSPENDED", "STOPPED"})
# Ended by Slurm, but a job submitted with --requeue may come back (preemption, node failure): not final
# until Slurm stops listing it as such for a while; the agent resubmits it if Slurm does not.
INTERRUPTED_STATES = frozenset({"PREEMPTED", "NODE_FAIL", "BOOT_FAIL"})


def base_state(state: str) -> str:
    """`CANCELLED by 0` → CANCELLED; `RUNNING+` → RUNNING."""
    return state.split()[0].rstrip("+").upper() if state.strip() else ""


def pending_words(job: SlurmJob, first_attempt: int) -> str:
    reason = job.reason.strip() or "None"
    eligible = (
        f", eligible at {job.start_time[11:16]}" if len(job.start_time) >= 16 and job.start_time[10] == "T" else ""
    )
    words = REASON_WORDS.get(reason)
    if reason in ("None", "") or words is None:
        words = "waiting in Slurm's queue" + (f" ({reason})" if reason not in ("None", "") else "")
    text = f"Slurm job {job.job_id}: " + words.format(partition=job.partition or "?", eligible=eligible)
    if job.restarts:
        again = f"requeued (restart {job.restarts}, attempt {first_attempt + job.restarts})"
        text = f"Slurm job {job.job_id}: {again}; " + text.split(": ", 1)[1]
    return text


def read(job: SlurmJob | None, first_attempt: int, cancel_requested: bool) -> Reading:
    """What `job` (None: Slurm does not list it) means for a rankzero job whose attempt 1st ran as
    `first_attempt`, `cancel_requested` when rankzero asked for the cancel."""
    if job is None:
        return Reading(Phase.unknown, "Slurm does not list the job now (finished and forgotten, or the controller "
                       "is unreachable): asking again, nothing is concluded from its absence")  # fmt: skip
    state = base_state(job.state)
    where = f" on {job.nodes}" if job.nodes and job.nodes != "(null)" else ""
    head = f"Slurm job {job.job_id}"
    if state in PENDING_STATES:
        return Reading(Phase.pending, pending_words(job, first_attempt))
    if state in RUNNING_STATES:
        extra = {"COMPLETING": " (completing)", "SUSPENDED": " (suspended by Slurm)", "STOPPED": " (stopped)",
                 "SIGNALING": " (being signalled)"}.get(state, "")  # fmt: skip
        return Reading(Phase.running, f"{head}: running{where} in partition {job.partition or '?'}{extra}")
    if state in INTERRUPTED_STATES:
        why = {"PREEMPTED": "preempted", "NODE_FAIL": "a node failed", "BOOT_FAIL": "a node failed to boot"}[state]
        return Reading(Phase.pending, f"{head}: {why}; waiting for it to be requeued")
    code = f" with exit code {job.exit_code}" if job.exit_code not in (None, 0) else ""
    if state == "COMPLETED":
        return Reading(Phase.ended, f"{head}: completed{where}", JobStatus.succeeded)
    if state == "CANCELLED":
        return Reading(Phase.ended, f"{head}: {cancelled_words(job, cancel_requested)}", JobStatus.cancelled)
    ended = {
        "FAILED": f"failed{code}",
        "TIMEOUT": "reached its time limit before it could checkpoint (raise the time limit or the signal margin)",
        "OUT_OF_MEMORY": "ran out of memory (Slurm ended it): ask for more memory or use a smaller batch",
        "DEADLINE": "reached its deadline",
        "REVOKED": "was revoked (a federated sibling ran it)",
    }.get(state)
    if ended is None:
        return Reading(Phase.running, f"{head}: in Slurm state {state or '?'} (not known to rankzero; still watched)")
    status = JobStatus.cancelled if cancel_requested else JobStatus.failed
    return Reading(Phase.ended, f"{head}: {ended}{where}", status)


def cancelled_words(job: SlurmJob, cancel_requested: bool) -> str:
    """A cancel rankzero asked for is "cancelled"; any other is the site's: "cancelled by Slurm (scancel by USER)",
    naming who where Slurm's accounting says (sacct's "CANCELLED by UID")."""
    if cancel_requested:
        return "cancelled"
    return f"cancelled by Slurm (scancel by {job.by})" if job.by else "cancelled by Slurm (scancel)"


def cancelled_by_uid(state: str) -> int | None:
    """sacct's "CANCELLED by 1000" → 1000 (None for any other state, or no uid)."""
    parts = state.split()
    if len(parts) == 3 and base_state(parts[0]) == "CANCELLED" and parts[1] == "by" and parts[2].isdigit():
        return int(parts[2])
    return None


# How long a job may stay PREEMPTED / NODE_FAIL / BOOT_FAIL before the agent takes it as ended: Slurm requeues a
# job within a period or two where it will (PreemptMode=REQUEUE); where it will not (PreemptMode=CANCEL, a job an
# admin made not requeueable) the state stays, and the agent submits the job again if its ranks checkpointed.
INTERRUPTED_FINAL_S = 30.0


def settled(job: SlurmJob | None, reading: Reading, interrupted_for_s: float) -> Reading:
    """`reading`, or, for a job interrupted for `interrupted_for_s` ≥ INTERRUPTED_FINAL_S without a requeue, its
    end (failed: the agent submits it again when its ranks checkpointed on the stop signal)."""
    state = base_state(job.state) if job is not None else ""
    if job is None or state not in INTERRUPTED_STATES or interrupted_for_s < INTERRUPTED_FINAL_S:
        return reading
    why = {"PREEMPTED": "preempted", "NODE_FAIL": "a node failed", "BOOT_FAIL": "a node failed to boot"}[state]
    return Reading(Phase.ended, f"Slurm job {job.job_id}: {why}, and Slurm did not requeue it", JobStatus.failed)


NO_NODES = frozenset({"", "(null)", "None assigned", "None"})  # what squeue / sacct print before an allocation


def status_of(job: SlurmJob, reading: Reading) -> BackendStatus:
    """What the job page shows of a Slurm job: its partition, its nodes (none while it waits), Slurm's state
    and the reading's words."""
    nodes = job.nodes.strip()
    waiting = reading.phase is Phase.pending
    return BackendStatus(
        partition=job.partition.strip() or None,
        nodes=None if waiting or nodes in NO_NODES else nodes,
        state=base_state(job.state) or None,
        words=reading.words,
    )


def exit_status(raw: str) -> int | None:
    """The exit code in `sacct`'s "3:0" (code:signal) or `squeue`'s wait status (768 → 3)."""
    raw = raw.strip()
    try:
        if ":" in raw:
            code, sig = (int(p) for p in raw.split(":", 1))
            return 128 + sig if sig else code
        status = int(raw)
    except ValueError:
        return None
    return (status >> 8) & 0xFF if status & 0x7F == 0 else 128 + (status & 0x7F)
