"""`python -m worker.slurm.prepare`: the batch step's one step before `srun`, once per Slurm (re)start.

It makes each rank's log folder (`logs/attempt_N/<rank>/`, where `srun --output/--error` write and the
rank entry points TORCHELASTIC_ERROR_FILE) and writes the spec the ranks read: the agent's spec
(`spec.slurm.json`) with `resume_from` set to the run's newest intact checkpoint, when there is one (a
requeued job resumes; trainer/checkpoint_files.py is the one rule). A script job finds its own
checkpoint (`rankzero.load_checkpoint`). Torch-free: it costs the job a fraction of a second.

Before the run has a checkpoint of its own, a spec's `resume_from` (another job's checkpoint: `rankzero resume`,
a clone) is a key relative to the runs dir (`job_<id>/checkpoints/step_<N>.pt`, core/resume_source.py): it is
resolved here against the runs dir as the compute nodes see it (the API's, shared), and an attempt whose
checkpoint is not there fails before `srun` with a sentence saying so: a job never trains from scratch
believing it resumed. A script's ranks get the resolved path as RANKZERO_RESUME_FROM (worker/slurm/rank.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from trainer import checkpoint_files
from trainer.run_dir import RunDir

BASE_SPEC = "spec.slurm.json"  # written by the agent at submit; spec.json is what this attempt runs


@dataclass(frozen=True)
class Resume:
    path: str | None  # spec.json's `resume_from` for this attempt (None: it starts from scratch)
    error: str | None = None  # why this attempt cannot start (it fails before srun)


def resume_for_attempt(
    given: object, newest: Path | None, own: bool, runs_dir: Path, exists: Callable[[Path], bool]
) -> Resume:
    """Where this attempt resumes from, pure. `given`: the spec's `resume_from` (a key relative to the runs dir,
    or an older spec's absolute path); `newest`: the built-in run's own newest intact checkpoint, which wins (as
    a worker's restart: node_zero `_run_attempt`); `own`: the run has a checkpoint of its own (a script's
    `rankzero.load_checkpoint()` prefers it, so a `given` that is gone no longer matters)."""
    if newest is not None:
        return Resume(str(newest.resolve()))
    if not isinstance(given, str) or not given:
        return Resume(None)
    if ".." in PurePosixPath(given).parts:
        return Resume(None, f"resume_from {given[:200]!r} is not a checkpoint in the runs dir: resubmit the job "
                            "with `rankzero resume JOB --checkpoint STEP`")  # fmt: skip
    path = Path(given) if Path(given).is_absolute() else runs_dir / given
    if exists(path):
        return Resume(str(path))
    if own:
        return Resume(None)
    return Resume(None, f"resume_from {given[:200]!r} is not in this Slurm pool's runs dir ({path} is missing), "
                        "so the job cannot continue from it: its checkpoint was deleted (retention) or lives on "
                        "a host with a runs dir of its own; resume from a checkpoint in the API's runs dir, "
                        "or run the job on a hosts pool, which fetches it from the artifact store")  # fmt: skip


def spec_for_attempt(base: dict, newest: Path | None, runs_dir: Path, *, own: bool | None = None) -> dict:
    """The spec this attempt runs: `base`, resuming from the checkpoint `newest` when there is one, else from
    its own `resume_from` resolved in `runs_dir`; ValueError saying why it cannot start."""
    decision = resume_for_attempt(base.get("resume_from"), newest, newest is not None if own is None else own,
                                  runs_dir, Path.is_file)  # fmt: skip
    if decision.error is not None:
        raise ValueError(decision.error)
    if decision.path is None and not base.get("resume_from"):
        return base
    return {**base, "resume_from": decision.path}


def prepare(run_root: Path, attempt: int, ranks: int, script: bool) -> None:
    run = RunDir(run_root)
    logs = run.attempt_logs(attempt)
    for rank in range(ranks):
        (logs / str(rank)).mkdir(parents=True, exist_ok=True)
    run.checkpoints.mkdir(parents=True, exist_ok=True)
    base = json.loads((run_root / BASE_SPEC).read_text())
    own = checkpoint_files.newest_intact(run, checkpoint_files.recorded_shas(run))
    spec = spec_for_attempt(base, None if script else own, run_root.resolve().parent, own=own is not None)
    tmp = run.spec.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(spec, indent=2))
    tmp.replace(run.spec)
    resume = spec.get("resume_from")
    if resume:  # its own checkpoint by name (the tests and the requeue story read it), another job's by path
        said = Path(resume).name if Path(resume).parent == run.checkpoints.resolve() else resume
        print(f"rankzero: attempt {attempt} resumes from {said}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m worker.slurm.prepare")
    parser.add_argument("--run-dir", required=True, type=Path)
    parser.add_argument("--attempt", required=True, type=int)
    parser.add_argument("--ranks", required=True, type=int)
    parser.add_argument("--script", action="store_true")
    args = parser.parse_args(argv)
    if not 1 <= args.attempt <= 1_000_000 or not 1 <= args.ranks <= 65_536:
        print("rankzero: --attempt or --ranks out of range", file=sys.stderr)
        return 2
    try:
        prepare(args.run_dir, args.attempt, args.ranks, args.script)
    except ValueError as exc:  # the batch log's last words: the job's error (worker/errors.py diagnose)
        print(f"rankzero: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
