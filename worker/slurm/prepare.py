"""`python -m worker.slurm.prepare`: the batch step's one step before `srun`, once per Slurm (re)start.

It makes each rank's log folder (`logs/attempt_N/<rank>/`, where `srun --output/--error` write and the
rank entry points TORCHELASTIC_ERROR_FILE) and writes the spec the ranks read: the agent's spec
(`spec.slurm.json`) with `resume_from` set to the run's newest intact checkpoint, when there is one (a
requeued job resumes; trainer/checkpoint_files.py is the one rule). A script job finds its own
checkpoint (`rankzero.load_checkpoint`). Torch-free: it costs the job a fraction of a second.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from trainer import checkpoint_files
from trainer.run_dir import RunDir

BASE_SPEC = "spec.slurm.json"  # written by the agent at submit; spec.json is what this attempt runs


def spec_for_attempt(base: dict, newest: Path | None) -> dict:
    """The spec this attempt runs: `base`, resuming from the checkpoint `newest` when there is one (as the
    worker does for a restart: node_zero `_run_attempt`)."""
    return base if newest is None else {**base, "resume_from": str(newest.resolve())}


def prepare(run_root: Path, attempt: int, ranks: int, script: bool) -> None:
    run = RunDir(run_root)
    logs = run.attempt_logs(attempt)
    for rank in range(ranks):
        (logs / str(rank)).mkdir(parents=True, exist_ok=True)
    run.checkpoints.mkdir(parents=True, exist_ok=True)
    base = json.loads((run_root / BASE_SPEC).read_text())
    newest = None if script else checkpoint_files.newest_intact(run, checkpoint_files.recorded_shas(run))
    spec = spec_for_attempt(base, newest)
    tmp = run.spec.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(spec, indent=2))
    tmp.replace(run.spec)
    if newest is not None:
        print(f"rankzero: attempt {attempt} resumes from {newest.name}", flush=True)


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
    prepare(args.run_dir, args.attempt, args.ranks, args.script)
    return 0


if __name__ == "__main__":
    sys.exit(main())
