"""Why a Slurm job's ranks stopped and what follows (worker/slurm/stops.py), by tables: the site's word is final
(issue 39). The `scontrol show job` lines are as Slurm 22.05 printed them at each kind of stop (the module's
docstring); the batch step's edge (worker/slurm/stopped.py) against a stand-in `scontrol` on PATH."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from worker.slurm.stops import (
    Cause,
    ShownJob,
    cause_of,
    duration_s,
    parse_show_job,
    read_record,
    requeue_words,
    resubmits,
)

pytestmark = pytest.mark.xdist_group("slurm")

ROOT = Path(__file__).resolve().parents[2]


def shown(state: str = "RUNNING", restarts: int = 0, preempt: str = "None", run: str = "00:00:20",
          limit: str = "UNLIMITED") -> str:  # fmt: skip
    return (f"JobId=12 JobName=rankzero-p-7-1 UserId=rz(1000) JobState={state} Reason=None Dependency=(null) "
            f"Requeue=1 Restarts={restarts} BatchFlag=1 RunTime={run} TimeLimit={limit} Partition=low "
            f"PreemptEligibleTime=2026-12-07T01:20:48 PreemptTime={preempt} NodeList=n[1-2]")  # fmt: skip


@pytest.mark.parametrize(
    ("line", "restart", "marked", "cause"),
    [
        (shown("COMPLETING"), 0, False, Cause.cancelled),  # scancel (and `scancel --signal=KILL --full`)
        (shown("COMPLETING", restarts=2), 2, False, Cause.cancelled),  # scancel of a job requeued twice before
        (shown("CANCELLED"), 0, False, Cause.cancelled),
        (shown("COMPLETING", restarts=1), 0, False, Cause.requeued),  # scontrol requeue: Slurm counted it already
        (shown("COMPLETING", restarts=1, preempt="2026-12-07T01:18:56"), 0, False, Cause.preempted),  # past GraceTime
        (shown(preempt="2026-12-07T01:18:56"), 0, False, Cause.preempted),  # within GraceTime: still RUNNING
        (shown("PREEMPTED"), 0, False, Cause.preempted),
        (shown(run="00:00:20", limit="00:02:00"), 0, False, Cause.time_limit),  # warned: 100 s left, margin 60
        (shown(run="00:30:00", limit="1-00:00:00"), 0, False, Cause.signalled),  # `scancel --signal=USR1`, say
        (shown(), 0, False, Cause.signalled),  # UNLIMITED: no time limit to be near
        (shown("TIMEOUT"), 0, False, Cause.time_limit),
        (shown(preempt="2026-12-07T01:18:56"), 0, True, Cause.rankzero),  # rankzero's cancel wins over everything
        (shown("COMPLETING"), 0, True, Cause.rankzero),
    ],
)  # fmt: skip
def test_cause_of(line: str, restart: int, marked: bool, cause: Cause) -> None:
    assert cause_of(parse_show_job(line), restart, 60, marked) is cause


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("00:02:00", 120), ("1-00:00:00", 86400), ("2-03:04:05", 183845), ("05:30", 330), ("90", 5400),
     ("UNLIMITED", None), ("Partition_Limit", None), ("", None)],
)  # fmt: skip
def test_duration_s(text: str, seconds: int | None) -> None:
    assert duration_s(text) == seconds


def test_parse_show_job() -> None:
    got = parse_show_job(shown("RUNNING", restarts=3, run="00:01:00", limit="00:05:00"))
    assert got == ShownJob("RUNNING", 3, "None", 60, 300, "low")
    with pytest.raises(ValueError, match="no JobState"):
        parse_show_job("slurm_load_jobs error: Invalid job id specified")


@pytest.mark.parametrize(
    ("state", "recorded", "resumable", "cancelling", "again"),
    [
        ("CANCELLED", None, True, False, False),  # a pending job Slurm cancelled after a requeue: never again
        ("CANCELLED by 0", Cause.preempted, True, False, False),
        ("FAILED", Cause.cancelled, True, False, False),
        ("FAILED", Cause.signalled, True, False, False),  # an outside stop signal: the site's word
        ("FAILED", Cause.preempted, True, False, True),  # preempted, the script's requeue refused (Requeue=0)
        ("COMPLETED", Cause.time_limit, True, False, True),
        ("TIMEOUT", Cause.time_limit, True, False, True),
        ("FAILED", Cause.preempted, False, False, False),  # no checkpoint on the stop: nothing to resume
        ("PREEMPTED", None, True, False, True),  # PreemptMode=CANCEL, settled without a requeue
        ("NODE_FAIL", None, True, False, True),
        ("PREEMPTED", None, True, True, False),  # rankzero asked for the cancel
        ("FAILED", None, True, False, False),
    ],
)  # fmt: skip
def test_resubmits(state: str, recorded: Cause | None, resumable: bool, cancelling: bool, again: bool) -> None:
    assert resubmits(state, recorded, resumable, cancelling) is again


def test_each_requeue_has_its_own_words() -> None:
    causes = (Cause.preempted, Cause.time_limit, Cause.requeued, Cause.node_failure)
    words = [requeue_words(c, "low") for c in causes]
    assert len(set(words)) == 4
    assert "preempted in partition low" in words[0] and "time limit" in words[1]
    assert "scontrol requeue" in words[2] and "node failure" in words[3]
    # No stop record: what the agent saw of the job, else no guess.
    assert requeue_words(Cause.node_failure, unseen=True) == "requeued by Slurm after a node failure"
    assert "before its ranks could checkpoint" in requeue_words(Cause.preempted, "low", unseen=True)
    assert "left no record of why" in requeue_words(None, unseen=True)


def _stopped(tmp_path: Path, line: str, restart: int = 0, marked: bool = False) -> tuple[str, list[str]]:
    """`python -m worker.slurm.stopped` in a batch step whose `scontrol show job` prints `line`; its output and
    the scontrol calls it made."""
    bin_dir, run = tmp_path / "bin", tmp_path / "run"
    bin_dir.mkdir()
    run.mkdir()
    if marked:
        (run / "slurm_cancel_requested").touch()
    calls = tmp_path / "calls"
    script = f'#!/bin/sh\necho "$@" >> {calls}\n[ "$1" = show ] && echo {json.dumps(line)}\nexit 0\n'
    (bin_dir / "scontrol").write_text(script)
    (bin_dir / "scontrol").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "12",
           "SLURM_RESTART_COUNT": str(restart), "PYTHONPATH": str(ROOT)}  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "worker.slurm.stopped", "--run-dir", str(run), "--margin", "60"],
                          env=env, capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    return done.stdout, calls.read_text().splitlines()


@pytest.mark.parametrize(
    ("line", "marked", "cause", "requeues"),
    [
        (shown("COMPLETING"), False, Cause.cancelled, False),
        (shown(preempt="2026-12-07T01:18:56"), False, Cause.preempted, True),
        (shown(run="00:00:20", limit="00:02:00"), False, Cause.time_limit, True),
        (shown("COMPLETING", restarts=1), False, Cause.requeued, False),
        (shown(preempt="2026-12-07T01:18:56"), True, Cause.rankzero, False),
    ],
)  # fmt: skip
def test_the_batch_step_records_the_cause_and_requeues_only_what_resumes(
    tmp_path: Path, line: str, marked: bool, cause: Cause, requeues: bool
) -> None:
    out, calls = _stopped(tmp_path, line, marked=marked)
    assert read_record(tmp_path / "run", "12", 0) == (cause, "low")
    assert ("requeue 12" in calls) is requeues, (out, calls)
    assert "rankzero: stopped on a signal: " in out
