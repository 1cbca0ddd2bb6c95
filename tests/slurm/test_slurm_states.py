"""Slurm's states in rankzero's words (worker/slurm/states.py), the parsers of squeue/sacct/sinfo
(worker/slurm/commands.py) and how an ended attempt ends the job (worker/slurm/endings.py `ending`): by tables."""

from __future__ import annotations

import pytest

from core.tables import JobStatus
from worker.errors import Failure
from worker.slurm.commands import parse_sacct, parse_sinfo, parse_squeue
from worker.slurm.endings import ending, nice_for, stopped_resumably
from worker.slurm.states import Phase, Reading, SlurmJob, exit_status, read, settled, status_of

pytestmark = pytest.mark.xdist_group("slurm")

S = JobStatus


def job(state: str, **kw: object) -> SlurmJob:
    return SlurmJob("12", state, **{"partition": "gpu", **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("slurm", "cancel", "phase", "status", "words"),
    [
        (job("PENDING", reason="Resources"), False, Phase.pending, None, "waiting for resources in partition gpu"),
        (job("PENDING", reason="Priority"), False, Phase.pending, None, "behind higher-priority jobs"),
        (job("PENDING", reason="BeginTime", restarts=1, start_time="2026-11-25T14:02:00"), False, Phase.pending, None,
         "requeued (restart 1, attempt 2); waiting for its begin time, eligible at 14:02"),
        (job("PENDING", reason="PartitionTimeLimit"), False, Phase.pending, None, "will never start"),
        (job("PENDING", reason="SomethingNew"), False, Phase.pending, None, "waiting in Slurm's queue (SomethingNew)"),
        (job("CONFIGURING"), False, Phase.pending, None, "waiting"),
        (job("REQUEUED"), False, Phase.pending, None, "waiting"),
        (job("RUNNING", nodes="n[1-2]"), False, Phase.running, None, "running on n[1-2] in partition gpu"),
        (job("COMPLETING", nodes="n1"), False, Phase.running, None, "(completing)"),
        (job("SUSPENDED"), False, Phase.running, None, "suspended by Slurm"),
        (job("PREEMPTED"), False, Phase.pending, None, "preempted; waiting for it to be requeued"),
        (job("NODE_FAIL"), False, Phase.pending, None, "a node failed"),
        (job("COMPLETED"), False, Phase.ended, S.succeeded, "completed"),
        (job("FAILED", exit_code=3), False, Phase.ended, S.failed, "failed with exit code 3"),
        (job("TIMEOUT"), False, Phase.ended, S.failed, "time limit"),
        (job("OUT_OF_MEMORY"), False, Phase.ended, S.failed, "out of memory"),
        (job("CANCELLED by 0"), True, Phase.ended, S.cancelled, "cancelled"),
        (job("CANCELLED"), False, Phase.ended, S.cancelled, "Slurm job 12: cancelled by Slurm (scancel)"),
        (job("CANCELLED by 0", by="root"), False, Phase.ended, S.cancelled, "cancelled by Slurm (scancel by root)"),
        (job("FAILED"), True, Phase.ended, S.cancelled, "failed"),  # a cancel that ended badly is still a cancel
        (job("DEADLINE"), False, Phase.ended, S.failed, "deadline"),
        (job("BRAND_NEW_STATE"), False, Phase.running, None, "not known to rankzero; still watched"),
        (None, False, Phase.unknown, None, "nothing is concluded from its absence"),
    ],
)  # fmt: skip
def test_read(slurm: SlurmJob | None, cancel: bool, phase: Phase, status: JobStatus | None, words: str) -> None:
    got = read(slurm, 1, cancel)
    assert (got.phase, got.status) == (phase, status)
    assert words in got.words


@pytest.mark.parametrize(
    ("raw", "code"), [("0:0", 0), ("3:0", 3), ("0:9", 137), ("768", 3), ("0", 0), ("9", 137), ("x", None)]
)
def test_exit_status(raw: str, code: int | None) -> None:
    assert exit_status(raw) == code


def test_parsers() -> None:
    squeue = "41|RUNNING|None|n[1-2]|low|2|2026-11-25T20:06:49|0|\n42|PENDING|Resources||high|0|N/A||\n\ngarbage\n"
    got = parse_squeue(squeue)
    assert got["41"] == SlurmJob("41", "RUNNING", "None", "n[1-2]", "low", 2, "2026-11-25T20:06:49", 0)
    assert got["42"].reason == "Resources" and got["42"].exit_code is None
    sacct = "41|REQUEUED|None|n1|low|0:0|2026-11-25T20:00:00\n41|COMPLETED|None|n1|low|0:0|2026-11-25T20:01:00\n"
    assert parse_sacct(sacct)["41"].state == "COMPLETED"  # the last record of a requeued job
    cancelled = parse_sacct("43|CANCELLED by 1000|None|n1|low|0:0|2026-11-25T20:00:00\n", {1000: "ana"}.__getitem__)
    assert (cancelled["43"].state, cancelled["43"].by) == ("CANCELLED by 1000", "ana")
    assert parse_sacct("44|CANCELLED by 0|None|n1|low|0:0|x\n")["44"].by == "root"  # named by this host's users
    nodes = parse_sinfo("n1|low*|idle|none|2|(null)\nn2|high|mixed|none|2|gpu:4\n")
    assert [(n.node, n.partition, n.state) for n in nodes] == [("n1", "low*", "idle"), ("n2", "high", "mixed")]


DONE = Reading(Phase.ended, "Slurm job 12: completed", S.succeeded)
FAILED = Reading(Phase.ended, "Slurm job 12: failed with exit code 1", S.failed)
ABORTED = Reading(Phase.ended, "Slurm job 12: failed with exit code 134", S.failed)


@pytest.mark.parametrize(
    ("reading", "kw", "status", "error"),
    [
        (DONE, {"finished": True, "script": False, "hole": None, "exit_code": 0}, S.succeeded, None),
        (DONE, {"finished": False, "script": False, "hole": None, "exit_code": 0}, S.failed, "no `finished` event"),
        (DONE, {"finished": True, "script": False, "hole": "no events", "exit_code": 0}, S.failed, "no events"),
        (DONE, {"finished": False, "script": True, "hole": None, "exit_code": 0}, S.succeeded, None),
        (DONE, {"finished": True, "script": False, "hole": None, "exit_code": 2}, S.failed, "exit code 2"),
        # A rank died in process-group teardown after the trainer's `finished` (gloo's abort, exit 134): the
        # record is whole, so the run succeeded, as a worker's does; not for a script, nor a record with a hole.
        (ABORTED, {"finished": True, "script": False, "hole": None, "exit_code": 134}, S.succeeded, None),
        (ABORTED, {"finished": True, "script": False, "hole": "seq 9 missing", "exit_code": 134}, S.failed,
         "exit code 134"),
        (ABORTED, {"finished": False, "script": False, "hole": None, "exit_code": 134}, S.failed, "exit code 134"),
        (ABORTED, {"finished": True, "script": True, "hole": None, "exit_code": 134}, S.failed, "exit code 134"),
        (FAILED, {"finished": False, "script": True, "hole": None, "exit_code": 1,
                  "failure": Failure("ValueError: boom", rank=1, exit_code=1, traceback=["ValueError: boom"])},
         S.failed, "rank 1 failed with exit code 1: ValueError: boom"),
    ],
)  # fmt: skip
def test_ending(reading: Reading, kw: dict, status: JobStatus, error: str | None) -> None:
    got_status, words, cols = ending(reading, **{"failure": None, **kw})
    assert got_status == status
    if reading is ABORTED and status is S.succeeded:
        assert "teardown" in words and cols["exit_code"] == 134
    if error is None:
        assert "error" not in cols
    else:
        assert error in cols["error"]


@pytest.mark.parametrize(("priority", "nice"), [(0, 1000), (1000, 0), (-1000, 2000), (500, 500)])
def test_priority_to_nice(priority: int, nice: int) -> None:
    assert nice_for(priority) == nice


@pytest.mark.parametrize(
    ("types", "resumable"),
    [
        (["started", "metric", "checkpoint", "stopped"], True),
        (["started", "stopped", "started", "metric"], False),  # the resumed attempt is running
        (["started", "metric", "finished"], False),
        (["started", "failed"], False),
        ([], False),
    ],
)
def test_stopped_resumably(types: list[str], resumable: bool) -> None:
    assert stopped_resumably([{"type": t, "seq": i} for i, t in enumerate(types)]) is resumable


@pytest.mark.parametrize(
    ("slurm", "seen_for_s", "phase", "status", "words"),
    [
        (job("PREEMPTED"), 0.0, Phase.pending, None, "preempted; waiting for it to be requeued"),
        (job("PREEMPTED"), 29.9, Phase.pending, None, "preempted; waiting for it to be requeued"),
        (job("PREEMPTED"), 30.0, Phase.ended, S.failed, "preempted, and Slurm did not requeue it"),
        (job("NODE_FAIL"), 60.0, Phase.ended, S.failed, "a node failed, and Slurm did not requeue it"),
        (job("RUNNING"), 600.0, Phase.running, None, "running"),  # only interrupted states settle
        (None, 600.0, Phase.unknown, None, "nothing is concluded"),
    ],
)
def test_an_interrupted_job_slurm_does_not_requeue_has_ended(
    slurm: SlurmJob | None, seen_for_s: float, phase: Phase, status: JobStatus | None, words: str
) -> None:
    reading = settled(slurm, read(slurm, 1, cancel_requested=False), seen_for_s)
    assert (reading.phase, reading.status) == (phase, status) and words in reading.words


@pytest.mark.parametrize(
    ("slurm", "phase", "shown"),
    [
        (job("PENDING", reason="Resources", nodes=""), Phase.pending, ("gpu", None, "PENDING")),
        (job("RUNNING", nodes="n[1-2]"), Phase.running, ("gpu", "n[1-2]", "RUNNING")),
        (job("CANCELLED by 0", nodes="None assigned"), Phase.ended, ("gpu", None, "CANCELLED")),
        (job("COMPLETED", nodes="n1", partition=""), Phase.ended, (None, "n1", "COMPLETED")),
    ],
)
def test_what_the_job_page_shows_of_a_slurm_job(
    slurm: SlurmJob, phase: Phase, shown: tuple[str | None, str | None, str]
) -> None:
    reading = read(slurm, 1, cancel_requested=False)
    status = status_of(slurm, reading)
    assert reading.phase is phase and (status.partition, status.nodes, status.state) == shown
    assert status.words == reading.words
