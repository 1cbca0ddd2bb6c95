"""A job's own packages (spec `environment`, worker/environments/) on a Slurm pool.

The agent prepares it before `sbatch`, with worker/environments' own `for_attempt` (the lock resolved once per job,
the entry built once per lock, uv's output in the attempt's environment log, the job's environment row), in the
pool's shared runs dir (`<runs>/.environments/<key>`) where every compute node sees it; the batch script then runs
`prepare` and the ranks with that entry's interpreter. An entry is a venv layered over the agent's own Python (its
site-packages appended by a `.pth`), so the compute nodes must run the agent's Python from the shared file system:
the default `RANKZERO_SLURM_PYTHON`. A job whose environment cannot be made fails before Slurm sees it, with uv's
message.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import Engine

from core.settings import Settings
from trainer.run_dir import RunDir
from trainer.spec import JobSpec
from worker import environments

ENVIRONMENTS = ".environments"  # in the runs dir (a name no job's run dir has)


@dataclass(frozen=True)
class SlurmEnvironment:
    python: str  # the entry's interpreter, as the compute nodes see it
    root: str  # the entry (VIRTUAL_ENV), as the compute nodes see it
    summary: str  # for the timeline: "environment: 1 package (1 own), built in 2.1 s"


def foreign_python(settings: Settings) -> str | None:
    """Why an environment cannot be built for this pool's compute nodes (None: it can)."""
    wanted = settings.slurm_python
    if wanted is None or Path(wanted).resolve() == Path(sys.executable).resolve():
        return None
    return (
        f"this Slurm pool runs {wanted} on its compute nodes (RANKZERO_SLURM_PYTHON), but a job's environment is "
        f"built over the agent's own Python ({sys.executable}): remove `environment` from the spec, or run the agent "
        "with the compute nodes' Python and leave RANKZERO_SLURM_PYTHON unset"
    )


def prepare(  # noqa: PLR0913 (the job, where the runs dir is on either side, how to stay alive)
    engine: Engine,
    settings: Settings,
    job_id: int,
    attempt: int,
    spec: JobSpec,
    run: RunDir,
    code_dir: Path | None,
    compute_runs_dir: Path,
    keep_alive: Callable[[], object] | None = None,
) -> SlurmEnvironment | None:
    """The job's environment in the shared runs dir (None: the job names none). Raises
    `environments.EnvironmentFailed` saying why it cannot be made."""
    if spec.environment is None:
        return None
    refused = foreign_python(settings)
    if refused is not None:
        raise environments.EnvironmentFailed(refused)
    runs_dir = settings.resolved_runs_dir
    shared = settings.model_copy(update={"environment_dir": runs_dir / ENVIRONMENTS})
    ready = environments.for_attempt(engine, shared, job_id, attempt, spec, run, code_dir, keep_alive=keep_alive)
    if ready is None:
        return None
    seen_from_nodes = compute_runs_dir / ready.root.relative_to(shared.resolved_environment_dir.parent)
    return SlurmEnvironment(str(seen_from_nodes / "bin" / "python"), str(seen_from_nodes), ready.summary())
