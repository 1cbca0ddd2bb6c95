"""Metric series of a job, downsampled server-side past max_points (see api/metric_rollup.py)."""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query

from api.deps import JobId, SessionDep, SettingsDep, job_or_404
from api.models import ErrorDetail, MetricPointPublic, MetricSeries, MetricsResponse
from core import metric_rollup, run_files
from core.paths import UnsafePath, run_dir_of
from core.settings import Settings
from core.tables import Job
from trainer.run_dir import RunDir

router = APIRouter(tags=["metrics"])
MAX_STEP = 2**62
# Published to clients by GET /api/meta (the dashboard reads them there instead of copying them).
MAX_NAMES = 20  # series names per request
MAX_NAME_CHARS = 200
MIN_POINTS, MAX_POINTS, DEFAULT_POINTS = 10, 100_000, 2000
CONSOLE_SERIES_MAX_BYTES = 4 << 20  # console_series.json is read this far at most (as the worker reads it)


@router.get("/jobs/{job_id}/metrics", response_model=MetricsResponse, responses={404: {"model": ErrorDetail}})
def get_metrics(  # noqa: PLR0913 (one parameter per query field)
    job_id: JobId,
    session: SessionDep,
    settings: SettingsDep,
    name: Annotated[
        list[str] | None, Query(max_length=MAX_NAMES, description="Series names (repeatable); none: every series.")
    ] = None,
    max_points: Annotated[
        int,
        Query(
            ge=MIN_POINTS,
            le=MAX_POINTS,
            description="Most points per series; past it, each bucket keeps its min and max.",
        ),
    ] = DEFAULT_POINTS,
    start_step: Annotated[int | None, Query(ge=0, le=MAX_STEP)] = None,
    end_step: Annotated[int | None, Query(ge=0, le=MAX_STEP)] = None,
) -> MetricsResponse:
    job = job_or_404(session, job_id)
    if start_step is not None and end_step is not None and end_step < start_step:
        raise HTTPException(
            422, [{"loc": ["query", "end_step"], "msg": "end_step must be ≥ start_step", "type": "value_error"}]
        )
    if name and any(len(n) > MAX_NAME_CHARS or not n.isprintable() for n in name):
        raise HTTPException(
            422,
            [
                {
                    "loc": ["query", "name"],
                    "msg": f"series names are printable text of at most {MAX_NAME_CHARS} characters",
                    "type": "value_error",
                }
            ],
        )
    metric_rollup.refresh(session, job_id)
    names = list(dict.fromkeys(name)) if name else metric_rollup.series_names(session, job_id)
    console = _console_file(job, settings)
    from_console = _names(console)
    series = []
    for n in names:
        s = metric_rollup.query(session, job_id, n, max_points, start_step, end_step)
        series.append(
            MetricSeries(
                name=s.name,
                points=[MetricPointPublic(step=st, value=v) for st, v in s.points],
                total_points=s.total_points,
                downsampled=s.downsampled,
                source="console" if s.name in from_console else None,
            )
        )
    summary = console.get("summary") if console else None
    return MetricsResponse(job_id=job_id, series=series, console=summary if isinstance(summary, dict) else None)


def _console_names(job: Job, settings: Settings) -> set[str]:
    """The series a script job's console gave (worker/console_feed.py notes them in its run dir)."""
    return _names(_console_file(job, settings))


def _names(console: dict | None) -> set[str]:
    names = console.get("names") if console else None
    return {n for n in names if isinstance(n, str)} if isinstance(names, list) else set()


def _console_file(job: Job, settings: Settings) -> dict | None:
    """What a script job's console gave: series names and the reader's summary (worker/console_feed.py notes
    them in its run dir); None for the built-in trainer, {} before the worker wrote it."""
    if not job.spec or job.spec.get("entrypoint") is None:
        return None
    try:
        run = RunDir(run_dir_of(job, settings))  # the job's run dir: its link or FIFO is not followed, bounded
        found = json.loads(run_files.read_text(run.console_series, run.root, max_bytes=CONSOLE_SERIES_MAX_BYTES))
    except (OSError, ValueError, UnsafePath):
        return {}
    return found if isinstance(found, dict) else {}
