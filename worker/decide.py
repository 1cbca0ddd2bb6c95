"""What an ended attempt means for its job: a pure decision, with the words a user reads.

Node 0 gathers the facts once its ranks ended (worker/node_zero.py: the events, torchrun's account,
the run's record, the other nodes' hosts), `decide` turns them into an `Outcome`, and worker/outcome.py
`apply` writes it. worker/recover.py asks `host_loss` the same question for a job whose worker died.
No I/O here: every rule has a table-driven test (tests/worker/test_decide.py).
"""

from __future__ import annotations

import dataclasses
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from core.tables import JobStatus
from trainer.checkpoint_files import checkpoint_step
from trainer.exit_codes import EXIT_OK
from worker.attempt import Ended, StopReason
from worker.errors import Failure

S = JobStatus


# A taken rendezvous port is retried on a fresh port without spending anything this many times per job;
# the timeline's words for such a requeue are how node 0 counts them (worker/node_zero.py `_standing`).
PORT_RETRIES = 3
PORT_TAKEN_WORDS = "could not bind its rendezvous port"


class Counting(str, Enum):
    """What a requeue spends: a restart (spec.max_restarts), a host loss (RANKZERO_MAX_HOST_LOSSES) or nothing."""

    restart = "restart"
    host_loss = "host_loss"
    nothing = "nothing"


@dataclass(frozen=True)
class Finish:
    """The job ends as `status` (succeeded or cancelled)."""

    status: JobStatus
    detail: str
    exit_code: int | None
    account: str  # the task's one-line account (after "job <id>: ")
    account_if_lost: str = ""  # when the row had moved on and nothing was written


@dataclass(frozen=True)
class Fail:
    """The job fails; `error` is what the user reads (the failure, then where to resume from)."""

    error: str
    detail: str  # the timeline's line
    exit_code: int | None
    failed_rank: int | None = None
    account: str = "failed"


@dataclass(frozen=True)
class Requeue:
    """The job goes back to the queue and resumes from its latest checkpoint, spending `counting`."""

    detail: str
    counting: Counting
    exit_code: int | None
    account: str
    failed_rank: int | None = None
    otherwise: Fail | None = None  # written instead when the row can no longer be requeued (say, cancelling)


@dataclass(frozen=True)
class Nothing:
    """Nothing to write (the row left the live states, or is a later attempt's)."""

    account: str


Outcome = Finish | Fail | Requeue | Nothing


@dataclass(frozen=True)
class Standing:
    """The job's record that bounds what may happen to it: its attempt and what it has spent."""

    attempt: int
    restarts_used: int = 0
    max_restarts: int = 0
    host_losses: int = 0
    max_host_losses: int = 3
    ports_taken: int = 0  # earlier attempts that could not bind their rendezvous port (requeued, uncounted)
    job_id: int | None = None  # names the job in the resume command a failure suggests


@dataclass(frozen=True)
class Facts:
    """What node 0 found once the ranks ended (each None/False when not looked for or not there)."""

    finished: bool = False  # the trainer's `finished` event was read
    failed_event: Mapping[str, Any] | None = None  # the trainer's `failed` event
    diagnosed: Failure | None = None  # torchrun's account of a failure (worker/errors.py diagnose)
    trouble: str | None = None  # why the run dir could not be written (worker/run_record.py)
    hole: str | None = None  # what is missing from a finished run's record
    peer_lost: str | None = None  # another node's host that died while the ranks failed
    preempt_for: int | None = None  # the job we stepped back for
    latest_checkpoint: str | None = None  # the newest intact checkpoint, relative to the run dir
    port_taken: bool = False  # the launcher's log says another process held the rendezvous/master port


# Stops that hand the job back to the queue: when the trainer said `finished` before the stop reached its ranks
# (a drain or a preemption decided in the run's last second), the job is done, not resumed for nothing.
# A stop for lingering (worker/stop_reason.py) comes only after `finished`: the job succeeded, its teardown hung.
OVERTAKEN_BY_FINISH = {
    StopReason.drain: "finished before the drain's stop reached its ranks",
    StopReason.preempt: "finished before the preemption's stop reached its ranks",
    StopReason.lingered: "finished; {note}",
}


def looks_finished(ended: Ended, finished: bool) -> bool:
    """The ranks exited on their own, and ok (or the trainer said `finished` before a noisy teardown); or the
    trainer said `finished` before a drain's or preemption's stop reached them."""
    if ended.stopped_for is None:
        return ended.exit_code == EXIT_OK or finished
    return finished and ended.stopped_for in OVERTAKEN_BY_FINISH


def failed_on_its_own(ended: Ended, finished: bool) -> bool:
    """The ranks exited on their own and not ok: torchrun's account is worth reading."""
    return ended.stopped_for is None and not looks_finished(ended, finished)


def may_restart(ended: Ended, finished: bool) -> bool:
    """The attempt failed in a way a restart may cure (a peer's lost host is then looked for)."""
    return ended.stopped_for in (StopReason.stall, StopReason.memory) or failed_on_its_own(ended, finished)


def names_checkpoint(outcome: Outcome) -> bool:
    """The outcome is, or may fall back to, a failure whose error names the checkpoint to resume from."""
    return isinstance(outcome, Fail) or (isinstance(outcome, Requeue) and outcome.otherwise is not None)


def decide(standing: Standing, ended: Ended, facts: Facts) -> Outcome:
    """The outcome of an attempt whose ranks ended (on their own, or stopped by us)."""
    code = ended.exit_code
    finished = looks_finished(ended, facts.finished)
    stopped = None if finished else _stopped_by_us(standing, ended, facts)
    if stopped is not None:
        return stopped
    if finished:
        if facts.hole is not None:  # never a success with a hole in its record; a restart would not fill it
            failure = Failure(message=f"the run's record is incomplete: {facts.hole}", exit_code=code)
            return fail(failure, facts.latest_checkpoint, account="failed (incomplete record)", job_id=standing.job_id)
        # After `finished` the final checkpoint and every event are on disk; a rank dying in process-group
        # teardown (seen: gloo aborting when its peer exits first) loses nothing, so it is only noted.
        if ended.stopped_for is not None:
            detail = OVERTAKEN_BY_FINISH[ended.stopped_for].format(note=ended.note or "")
        elif code == EXIT_OK:
            detail = "finished"
        else:
            detail = f"finished (a rank exited with {code} during teardown, after the final checkpoint)"
        return Finish(S.succeeded, detail, code, "succeeded", "finished but its row had moved on")
    if facts.port_taken and failed_on_its_own(ended, facts.finished):
        return port_taken(standing, code, facts)
    return restart_or_fail(standing, failure_of(ended, facts), facts.peer_lost, facts.latest_checkpoint)


def _stopped_by_us(standing: Standing, ended: Ended, facts: Facts) -> Outcome | None:
    """The outcome of an attempt the worker stopped for a reason of its own (None: the ranks ended by themselves,
    or were stopped for a failure a restart may cure: stall, memory)."""
    reason, code = ended.stopped_for, ended.exit_code
    if reason is StopReason.replaced:
        return Nothing(f"attempt {standing.attempt} replaced by a later attempt; ranks stopped, nothing written")
    if reason is StopReason.cancel:
        return Finish(S.cancelled, f"cancelled; ranks stopped (exit {code})", code, "cancelled")
    if reason is StopReason.gone:
        return Nothing("row left the live states; ranks stopped")
    if reason is StopReason.drain:  # the note says whose: an operator's drain of the host, or a worker's stop
        why = ended.note or "worker shutting down"
        return Requeue(f"{why}; the job resumes from its latest checkpoint", Counting.nothing, code,
                       f"handed back to the queue ({why})")  # fmt: skip
    if reason is StopReason.preempt:
        who = facts.preempt_for
        detail = f"preempted to make room for job {who} (higher priority); resumes from its latest checkpoint"
        return Requeue(detail, Counting.nothing, code, f"preempted for job {who}")
    if reason is StopReason.limit:  # a quota: a restart would break it again (worker/quota.py)
        failure = Failure(message=f"{ended.note}; the worker stopped its ranks", exit_code=code)
        return fail(failure, facts.latest_checkpoint, account="failed (over a limit)", job_id=standing.job_id)
    if reason is StopReason.host_lost:
        return host_loss(f"host {ended.note} went silent", standing, code, facts.latest_checkpoint, stopped=True)
    return None


def port_taken(standing: Standing, code: int | None, facts: Facts) -> Outcome:
    """An attempt that could not bind its rendezvous port: another process bound it between our choice and
    torchrun's bind, never the job's fault, so retried on a fresh port without spending anything, PORT_RETRIES
    times. Then it counts like any failure: something binds whatever port is picked (or the job's own code
    binds a port that is taken), and free retries would loop forever."""
    if standing.ports_taken < PORT_RETRIES:
        detail = f"attempt {standing.attempt} {PORT_TAKEN_WORDS} (another process took it); retrying on a fresh port"
        return Requeue(detail, Counting.nothing, code, "port taken, retrying on a fresh port")
    message = (
        f"{PORT_TAKEN_WORDS} {standing.ports_taken + 1} times, each time on a fresh random port: another process "
        "on this host keeps binding it, or the job's own code binds a port that is taken (torchrun's log says which)"
    )
    return restart_or_fail(standing, Failure(message=message, exit_code=code), facts.peer_lost, facts.latest_checkpoint)


def failure_of(ended: Ended, facts: Facts) -> Failure:
    """What went wrong, in the words the user reads: the watchdog's, the memory limit's, or the ranks' own."""
    if ended.stopped_for is StopReason.stall:
        message = f"{ended.note or 'no sign of life (stall_timeout_s)'}; its ranks were stopped"
        return Failure(message=message, exit_code=ended.exit_code)
    if ended.stopped_for is StopReason.memory:
        message = f"{ended.note}; its ranks were stopped (the worker enforces the limit: see docs/trainer.md)"
        return Failure(message=message, exit_code=ended.exit_code)
    return explain(facts.diagnosed or Failure(message="the ranks failed", exit_code=ended.exit_code), facts)


def explain(diagnosed: Failure, facts: Facts) -> Failure:
    """torchrun's account of the failure (worker/errors.py diagnose), told better where we know more."""
    failure = dataclasses.replace(diagnosed)
    if facts.trouble is not None:  # the trainer could not even write its `failed` event: say why
        failure.message = f"{facts.trouble}; {failure.message}"
        return failure
    if failure.rank is not None and failure.exit_code is not None and failure.exit_code < 0:
        # Killed by a signal: that rank wrote no error of its own, and rank 0's `failed` event
        # would only echo it (a broken connection), so torchrun's root cause names the rank.
        failure.message = (
            f"killed by {signal_name(-failure.exit_code)} (out of memory, or killed from outside); "
            "torchrun stopped the other ranks"
        )
    elif facts.failed_event and facts.failed_event.get("error"):
        _take_failed_event(failure, facts.failed_event)
    return failure


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _take_failed_event(failure: Failure, failed: Mapping[str, Any]) -> None:
    """The trainer's own `failed` event says it best: its error, rank and traceback."""
    failure.message = str(failed["error"])
    if isinstance(failed.get("rank"), int):
        failure.rank = failed["rank"]
    if failed.get("traceback") and not failure.traceback:
        tb = failed["traceback"]
        failure.traceback = tb if isinstance(tb, list) else str(tb).splitlines()


def restart_or_fail(standing: Standing, failure: Failure, peer_lost: str | None, latest: str | None) -> Outcome:
    """A failed attempt: a host loss when another node's host died with it (not the job's failure), else a
    restart while spec.max_restarts allows, else the job fails."""
    if peer_lost is not None:
        return host_loss(f"host {peer_lost} went silent ({failure.message})", standing, failure.exit_code, latest)
    failed = fail(failure, latest, job_id=standing.job_id)
    if standing.restarts_used < standing.max_restarts:
        n, most = standing.restarts_used + 1, standing.max_restarts
        detail = (
            f"attempt {standing.attempt} failed ({failure.message}); restarting from the latest checkpoint "
            f"({n}/{most} restarts)"
        )
        return Requeue(detail, Counting.restart, failure.exit_code, "restarting", failure.rank, otherwise=failed)
    return failed


def host_loss(
    what: str, standing: Standing, exit_code: int | None, latest: str | None, stopped: bool = False
) -> Requeue | Fail:
    """A host of the job was lost (not the job's fault): resume from the latest checkpoint without spending
    max_restarts, unless the job has lost hosts `max_host_losses` times already (it may be what kills them).
    `what` says which host and how; `stopped`: node 0 stopped every node itself. Node 0 and the recovery
    sweep (worker/recover.py) both decide here, so a host loss reads the same wherever it was noticed."""
    losses, most = standing.host_losses, standing.max_host_losses
    if losses >= most:
        message = (
            f"{what}, and the job had already lost its host {losses} times (RANKZERO_MAX_HOST_LOSSES "
            f"{most}): not resumed again; check whether the job exhausts its hosts (memory, disk)"
        )
        return fail(
            Failure(message=message, exit_code=exit_code),
            latest,
            account="failed (too many host losses)",
            job_id=standing.job_id,
        )
    then = "; every node stopped," if stopped else ";"
    detail = f"{what}{then} resuming from the latest checkpoint ({losses + 1}/{most} host losses)"
    return Requeue(detail, Counting.host_loss, exit_code, "host lost, resuming")


def resume_hint(latest: str, job_id: int | None) -> str:
    """The line naming the checkpoint to continue from and a command that does it (any job kind)."""
    step = checkpoint_step(latest)
    job = str(job_id) if job_id is not None else "JOB"
    command = f"rankzero resume {job}" + (f" --checkpoint {step}" if step is not None else "")
    return f"latest intact checkpoint: {latest} (continue from it: `{command}`, or Resume from here on the job page)"


def fail(failure: Failure, latest: str | None, account: str = "failed", job_id: int | None = None) -> Fail:
    """The job fails with `failure`; the error names the checkpoint to resume from, when there is one."""
    error = failure.text()
    if latest is not None:
        error += "\n" + resume_hint(latest, job_id)
    return Fail(error, failure.message[:500], failure.exit_code, failure.rank, account)
