"""Where a job's run directory is: `jobs.run_dir` when the worker recorded it, else `<runs dir>/<id>`.

Always resolved and checked to lie inside the runs dir, whatever the row says.
"""

from __future__ import annotations

from pathlib import Path

from api.paths import inside_runs_dir
from api.settings import Settings
from api.tables import Job


def default_run_dir(settings: Settings, job_id: int) -> Path:
    return settings.resolved_runs_dir / str(job_id)


def run_dir_of(job: Job | None, settings: Settings) -> Path:
    """The job's run dir, resolved; raises api.paths.UnsafePath when it would leave the runs dir."""
    if job is None:
        raise ValueError("job is required")
    raw = job.run_dir or str(default_run_dir(settings, job.id))
    return inside_runs_dir(raw, settings.resolved_runs_dir)
