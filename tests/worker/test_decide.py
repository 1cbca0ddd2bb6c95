"""worker/decide.py: what an ended attempt means for its job, with the words a user reads; one small case per
rule (pure, no I/O). worker/outcome.py writes what is decided here; worker/recover.py shares `host_loss`."""

from __future__ import annotations

import dataclasses

import pytest

from core.tables import JobStatus
from worker.attempt import Ended, StopReason
from worker.decide import (
    Counting,
    Facts,
    Fail,
    Finish,
    Nothing,
    Outcome,
    Requeue,
    Standing,
    decide,
    failed_on_its_own,
    host_loss,
    looks_finished,
    may_restart,
)
from worker.errors import Failure

S = JobStatus
R = StopReason
FIRST = Standing(attempt=1, restarts_used=0, max_restarts=2, host_losses=0, max_host_losses=3)
SPENT = Standing(attempt=3, restarts_used=2, max_restarts=2, host_losses=3, max_host_losses=3)
CRASH = Failure(message="CUDA error: out of memory", rank=1, exit_code=1, traceback=["Traceback", "  boom"])


def kind(outcome: Outcome) -> str:
    if isinstance(outcome, Requeue):
        return f"requeue:{outcome.counting.value}"
    if isinstance(outcome, Finish):
        return outcome.status.value
    return "fail" if isinstance(outcome, Fail) else "nothing"


CASES = [
    # (case, standing, ended, facts, expected kind, words the user reads (in detail or error))
    ("exit 0 with finished", FIRST, Ended(0), Facts(finished=True), "succeeded", "finished"),
    ("exit 0, a script with no events", FIRST, Ended(0), Facts(), "succeeded", "finished"),
    ("finished, then a rank died in teardown", FIRST, Ended(1), Facts(finished=True), "succeeded",
     "finished (a rank exited with 1 during teardown, after the final checkpoint)"),
    ("exit 0 with a hole in the record", FIRST, Ended(0), Facts(finished=True, hole="events 3–4 missing"), "fail",
     "the run's record is incomplete: events 3–4 missing"),
    ("a hole is never restarted", FIRST, Ended(0), Facts(hole="x"), "fail", "incomplete"),
    ("cancelled", FIRST, Ended(143, R.cancel), Facts(), "cancelled", "cancelled; ranks stopped (exit 143)"),
    ("row gone", FIRST, Ended(-15, R.gone), Facts(), "nothing", ""),
    ("replaced", FIRST, Ended(-15, R.replaced), Facts(), "nothing", ""),
    ("drain: handed back, nothing spent", SPENT, Ended(75, R.drain), Facts(), "requeue:nothing",
     "worker shutting down; the job resumes from its latest checkpoint"),
    ("preempted: nothing spent", SPENT, Ended(75, R.preempt), Facts(preempt_for=9), "requeue:nothing",
     "preempted to make room for job 9 (higher priority); resumes from its latest checkpoint"),
    ("finished before the drain's stop reached it", FIRST, Ended(0, R.drain), Facts(finished=True), "succeeded",
     "finished before the drain's stop reached its ranks"),
    ("finished before the preemption's stop reached it", FIRST, Ended(0, R.preempt),
     Facts(finished=True, preempt_for=9),
     "succeeded", "finished before the preemption's stop reached its ranks"),
    ("finished before a drain, with a hole", FIRST, Ended(0, R.drain), Facts(finished=True, hole="events 3–4 missing"),
     "fail", "the run's record is incomplete"),
    ("finished, its teardown hung and was stopped", FIRST,
     Ended(-9, R.lingered, "its processes had not exited 60 s after the trainer finished; they were stopped"),
     Facts(finished=True), "succeeded",
     "finished; its processes had not exited 60 s after the trainer finished; they were stopped"),
    ("a cancel stays a cancel though the run finished", FIRST, Ended(0, R.cancel), Facts(finished=True), "cancelled",
     "cancelled"),
    ("a quota's stop stays a failure though the run finished", SPENT, Ended(0, R.limit, "over disk_limit_mb"),
     Facts(finished=True), "fail", "over disk_limit_mb"),
    ("a peer's host lost", FIRST, Ended(75, R.host_lost, "h2"), Facts(), "requeue:host_loss",
     "host h2 went silent; every node stopped, resuming from the latest checkpoint (1/3 host losses)"),
    ("a peer's host lost once too often", SPENT, Ended(75, R.host_lost, "h2"), Facts(), "fail",
     "host h2 went silent, and the job had already lost its host 3 times (RANKZERO_MAX_HOST_LOSSES 3)"),
    ("ranks failed: restart", FIRST, Ended(1), Facts(diagnosed=CRASH), "requeue:restart",
     "attempt 1 failed (CUDA error: out of memory); restarting from the latest checkpoint (1/2 restarts)"),
    ("ranks failed, restarts spent", SPENT, Ended(1), Facts(diagnosed=CRASH), "fail",
     "rank 1 failed with exit code 1: CUDA error: out of memory"),
    ("ranks failed because a peer's host died", FIRST, Ended(1), Facts(diagnosed=CRASH, peer_lost="h2"),
     "requeue:host_loss", "host h2 went silent (CUDA error: out of memory); resuming from the latest checkpoint"),
    ("stalled: restart", FIRST, Ended(-9, R.stall, "no sign of life for 60 s"), Facts(), "requeue:restart",
     "attempt 1 failed (no sign of life for 60 s; its ranks were stopped)"),
    ("stalled, restarts spent", SPENT, Ended(-9, R.stall), Facts(), "fail",
     "no sign of life (stall_timeout_s); its ranks were stopped"),
    ("over the memory limit", SPENT, Ended(75, R.memory, "uses 3 GB of its 2 GB"), Facts(), "fail",
     "uses 3 GB of its 2 GB; its ranks were stopped (the worker enforces the limit: see docs/trainer.md)"),
    ("killed by a signal", SPENT, Ended(1), Facts(diagnosed=Failure("x", rank=2, exit_code=-9)), "fail",
     "killed by SIGKILL (out of memory, or killed from outside); torchrun stopped the other ranks"),
    ("the trainer's failed event says it best", SPENT, Ended(1),
     Facts(diagnosed=Failure("torchrun's words", exit_code=1), failed_event={"error": "ValueError: bad lr", "rank": 0,
           "traceback": "line 1\nline 2"}),
     "fail", "rank 0 failed with exit code 1: ValueError: bad lr\nline 1\nline 2"),
    ("the run dir's trouble comes first", SPENT, Ended(1),
     Facts(diagnosed=Failure("a rank failed", exit_code=1), trouble="the run directory's file system is full",
           failed_event={"error": "ignored"}),
     "fail", "the run directory's file system is full; a rank failed"),
    ("its port was taken: retried, nothing spent", SPENT, Ended(1), Facts(diagnosed=CRASH, port_taken=True),
     "requeue:nothing", "attempt 3 could not bind its rendezvous port (another process took it); retrying"),
    ("port taken, yet finished: a success", FIRST, Ended(0), Facts(finished=True, port_taken=True), "succeeded",
     "finished"),
    ("port taken, but stalled: the stall counts", SPENT, Ended(-9, R.stall), Facts(port_taken=True), "fail",
     "no sign of life"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "standing", "ended", "facts", "expected", "words"), CASES, ids=[c[0] for c in CASES])
def test_decide(case: str, standing: Standing, ended: Ended, facts: Facts, expected: str, words: str) -> None:
    outcome = decide(standing, ended, facts)
    assert kind(outcome) == expected
    text = outcome.error if isinstance(outcome, Fail) else getattr(outcome, "detail", "")
    assert words in text


def test_a_failed_job_names_its_latest_checkpoint_to_resume_from() -> None:
    standing = dataclasses.replace(SPENT, job_id=7)
    outcome = decide(standing, Ended(1), Facts(diagnosed=CRASH, latest_checkpoint="checkpoints/step_00000040.pt"))
    assert isinstance(outcome, Fail)
    assert outcome.error.endswith(
        "\nlatest intact checkpoint: checkpoints/step_00000040.pt (continue from it: "
        "`rankzero resume 7 --checkpoint 40`, or Resume from here on the job page)"
    )
    assert outcome.detail == "CUDA error: out of memory" and outcome.failed_rank == 1 and outcome.exit_code == 1
    assert outcome.error.splitlines()[1:3] == ["Traceback", "  boom"]


def test_a_restart_that_cannot_be_written_fails_the_job_instead() -> None:
    outcome = decide(FIRST, Ended(1), Facts(diagnosed=CRASH))
    assert isinstance(outcome, Requeue) and outcome.failed_rank == 1
    assert isinstance(outcome.otherwise, Fail) and outcome.otherwise.error.startswith("rank 1 failed")


def test_the_accounts_the_task_returns() -> None:
    assert decide(FIRST, Ended(0), Facts(finished=True)).account == "succeeded"
    assert decide(FIRST, Ended(0), Facts(finished=True)).account_if_lost == "finished but its row had moved on"  # type: ignore[union-attr]
    assert decide(FIRST, Ended(0), Facts(hole="x")).account == "failed (incomplete record)"
    assert decide(SPENT, Ended(0, R.host_lost, "h"), Facts()).account == "failed (too many host losses)"
    assert decide(FIRST, Ended(0, R.host_lost, "h"), Facts()).account == "host lost, resuming"
    assert decide(FIRST, Ended(0, R.preempt), Facts(preempt_for=4)).account == "preempted for job 4"
    assert decide(FIRST, Ended(0, R.gone), Facts()).account == "row left the live states; ranks stopped"
    assert decide(FIRST, Ended(1), Facts(diagnosed=CRASH)).account == "restarting"
    assert decide(SPENT, Ended(1), Facts(diagnosed=CRASH)).account == "failed"


def test_the_recovery_sweep_and_node_zero_word_a_host_loss_alike() -> None:
    standing = Standing(attempt=0, host_losses=1, max_host_losses=3)
    resumed = host_loss("worker lost (no heartbeat since 2026-01-01T00:00:00+00:00)", standing, None, None)
    assert isinstance(resumed, Requeue) and resumed.counting is Counting.host_loss
    assert resumed.detail == (
        "worker lost (no heartbeat since 2026-01-01T00:00:00+00:00); "
        "resuming from the latest checkpoint (2/3 host losses)"
    )
    failed = host_loss(
        "worker lost (x)", Standing(attempt=0, host_losses=3, max_host_losses=3), None, "checkpoints/s.pt"
    )
    assert isinstance(failed, Fail) and "RANKZERO_MAX_HOST_LOSSES 3" in failed.error
    assert failed.error.endswith(
        "latest intact checkpoint: checkpoints/s.pt (continue from it: `rankzero resume JOB`, "
        "or Resume from here on the job page)"
    )


@pytest.mark.parametrize(
    ("ended", "finished", "fin", "own", "restart"),
    [
        (Ended(0), False, True, False, False),
        (Ended(1), True, True, False, False),
        (Ended(1), False, False, True, True),
        (Ended(75, R.stall), False, False, False, True),
        (Ended(75, R.memory), False, False, False, True),
        (Ended(75, R.cancel), False, False, False, False),
        (Ended(0, R.drain), True, True, False, False),  # finished before the drain's stop reached it
        (Ended(0, R.drain), False, False, False, False),
        (Ended(0, R.cancel), True, False, False, False),  # a cancel stays a cancel
    ],
)
def test_which_facts_node_zero_gathers(ended: Ended, finished: bool, fin: bool, own: bool, restart: bool) -> None:
    assert looks_finished(ended, finished) is fin
    assert failed_on_its_own(ended, finished) is own
    assert may_restart(ended, finished) is restart


def test_nothing_is_decided_for_a_replaced_attempt() -> None:
    assert isinstance(decide(FIRST, Ended(-15, R.replaced), Facts(finished=True)), Nothing)


def test_only_an_outcome_that_may_fail_names_a_checkpoint() -> None:
    from worker.decide import names_checkpoint

    assert names_checkpoint(decide(SPENT, Ended(1), Facts(diagnosed=CRASH)))  # a Fail
    assert names_checkpoint(decide(FIRST, Ended(1), Facts(diagnosed=CRASH)))  # a restart that may fall back
    assert not names_checkpoint(decide(FIRST, Ended(0), Facts(finished=True)))
    assert not names_checkpoint(decide(FIRST, Ended(0, R.drain), Facts()))
    assert not names_checkpoint(decide(FIRST, Ended(0, R.host_lost, "h"), Facts()))
