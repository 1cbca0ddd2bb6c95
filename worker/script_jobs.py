"""What is particular to a script job (spec `entrypoint`): its working folder, and what counts as a sign
of life for the stall watchdog when the script writes no events.

The working folder is `<run>/work/`: one link per top-level entry of the job's unpacked (read-only)
code bundle, so the script sees its files by the same relative paths as on the user's machine, and
whatever it writes to the current directory (`torch.save("model.pt")`) lands in the run dir, kept with
the job and across its restarts, instead of failing on the read-only bundle.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from core import run_files
from core.settings import Settings
from rankzero import env
from trainer.entrypoint import Entrypoint
from trainer.run_dir import RunDir


def entrypoint_values(run: RunDir, job_id: int, settings: Settings) -> dict[str, str]:
    """What `${RANKZERO_...}` in an entrypoint's arguments stands for (trainer/entrypoint.py EXPANDED): the
    same values the ranks get in their environment."""
    return {
        env.DATASETS_DIR: str(settings.resolved_datasets_dir),
        env.RUN_DIR: str(run.root.resolve()),
        env.JOB_ID: str(int(job_id)),
    }


def script_job_env(spec: dict[str, Any], resume_inputs: tuple[Path, ...]) -> dict[str, Any]:
    """A script job's part of `rankzero.env.JobEnv`: the checkpoint it continues from (spec `resume_from`,
    once confined to the runs dir: worker/launch_command.py `resume_input`), and the world size and accumulation
    this attempt runs with (elastic fit launches fewer ranks and raises the accumulation: worker/attempt.py)."""
    if not spec.get("entrypoint"):
        return {}
    nproc, nnodes = int(spec.get("nproc") or 1), int(spec.get("nnodes") or 1)
    return {
        "resume_from": resume_inputs[0] if resume_inputs else None,
        "world_size": nproc * nnodes,
        "accumulation_steps": int(spec.get("accumulation_steps") or 1),
    }


def _check_script(entry: Entrypoint, code_dir: Path) -> None:
    if entry.script is None:
        return
    root = code_dir.resolve()
    script = (root / entry.script).resolve()
    if root not in script.parents or not script.is_file():
        raise FileNotFoundError(
            f"entrypoint script {entry.script!r} is not a file in the job's code bundle: give its path relative "
            "to the folder you uploaded (`rankzero submit job.yaml --code DIR`)"
        )


def script_workdir(run: RunDir, entry: Entrypoint, code_dir: Path | None) -> Path:
    """The script's working folder, its links to the bundle refreshed (raises FileNotFoundError, an OSError,
    when there is no bundle or the script is not in it: the launch fails with that message)."""
    if code_dir is None:
        raise FileNotFoundError("a script job runs inside its code bundle, and this job has none (spec `code`)")
    _check_script(entry, code_dir)
    work = run.work
    # The job may have made `work` (or a name in it) a link: every name is handled in the folder's descriptor,
    # opened without following one, or the worker would make and remove links wherever the job points.
    folder = run_files.open_dir(work, run.root)
    try:
        for item in sorted(code_dir.iterdir()):
            try:
                st = os.stat(item.name, dir_fd=folder, follow_symlinks=False)
            except FileNotFoundError:
                st = None
            if st is not None and stat.S_ISLNK(st.st_mode):
                if os.readlink(item.name, dir_fd=folder) == str(item):
                    continue
                os.unlink(item.name, dir_fd=folder)  # a link from another host's cache folder, say
            elif st is not None:
                continue  # the script wrote a file of that name itself: it is the script's
            os.symlink(item, item.name, dir_fd=folder)
    finally:
        os.close(folder)
    return work


def output_size(run: RunDir, attempt: int) -> int:
    """Bytes the attempt's ranks have written to their logs and TensorBoard files: a script job that
    emits no events is alive while this grows (the stall watchdog's sign of life)."""
    total = 0
    for base, pattern in ((run.attempt_logs(attempt), "*.log"), (run.tensorboard, "*tfevents*")):
        if not base.is_dir():
            continue
        for path in base.rglob(pattern):
            try:
                total += path.stat().st_size
            except OSError:
                continue
    return total
