"""`python -m worker.slurm.stopped`: the batch step's one step after its ranks exited 75 (checkpointed on a stop
signal). It asks Slurm why (`scontrol show job`), records the cause in the run dir (the agent names the requeue by
it: worker/slurm/stops.py), and requeues the job itself only on a preemption or the time-limit warning; a cancel by
anyone, an outside signal or an admin's `scontrol requeue` (Slurm's own requeue) gets nothing from it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from worker.slurm.script import CANCEL_MARK
from worker.slurm.stops import SCRIPT_REQUEUES, Cause, ShownJob, cause_of, parse_show_job, record_path, stop_words


def _scontrol(*argv: str) -> str:
    done = subprocess.run(["scontrol", *argv], capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        raise RuntimeError((done.stderr or done.stdout).strip() or f"scontrol {argv[0]} failed")
    return done.stdout


def decide(run_root: Path, slurm_job_id: str, restart: int, margin_s: int) -> tuple[Cause, ShownJob | None]:
    marked = (run_root / CANCEL_MARK).exists()
    try:
        shown = parse_show_job(_scontrol("show", "job", "-o", slurm_job_id))
    except (OSError, RuntimeError, ValueError, subprocess.TimeoutExpired) as exc:
        # Slurm does not say: nothing is requeued (the site's word is final); the agent resubmits a job Slurm
        # ends PREEMPTED or NODE_FAIL on its own.
        print(f"rankzero: scontrol show job {slurm_job_id}: {exc}", flush=True)
        return (Cause.rankzero if marked else Cause.signalled), None
    return cause_of(shown, restart, margin_s, marked), shown


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m worker.slurm.stopped")
    parser.add_argument("--run-dir", required=True, type=Path)
    parser.add_argument("--margin", required=True, type=int, help="the job's --signal margin (s)")
    args = parser.parse_args(argv)
    slurm_job_id = os.environ.get("SLURM_JOB_ID", "")
    if not slurm_job_id.isdigit():
        print("rankzero: not a Slurm batch step (no SLURM_JOB_ID)", file=sys.stderr)
        return 2
    restart = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
    cause, shown = decide(args.run_dir, slurm_job_id, restart, args.margin)
    partition = shown.partition if shown is not None else ""
    record = {"cause": cause.value, "partition": partition, "state": shown.state if shown else None}
    try:
        path = record_path(args.run_dir, slurm_job_id, restart)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record))
        tmp.replace(path)
    except OSError as exc:
        print(f"rankzero: could not write the stop record: {exc}", flush=True)
    print(f"rankzero: stopped on a signal: {stop_words(cause)}", flush=True)
    if cause in SCRIPT_REQUEUES:
        print(f"rankzero: checkpointed on a stop signal; requeueing job {slurm_job_id}", flush=True)
        try:
            _scontrol("requeue", slurm_job_id)
        except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
            print(f"rankzero: scontrol requeue failed ({exc}): the agent submits the job again", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
