"""Metric series of a job, downsampled server-side past max_points (see api/metric_rollup.py)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query

from api.deps import JobId, SessionDep, job_or_404
from api.models import ErrorDetail, MetricPointPublic, MetricSeries, MetricsResponse
from core import metric_rollup

router = APIRouter(tags=["metrics"])
MAX_STEP = 2**62


@router.get("/jobs/{job_id}/metrics", response_model=MetricsResponse, responses={404: {"model": ErrorDetail}})
def get_metrics(
    job_id: JobId,
    session: SessionDep,
    name: Annotated[
        list[str] | None, Query(max_length=20, description="Series names (repeatable); none: every series.")
    ] = None,
    max_points: Annotated[
        int, Query(ge=10, le=100_000, description="Most points per series; past it, each bucket keeps its min and max.")
    ] = 2000,
    start_step: Annotated[int | None, Query(ge=0, le=MAX_STEP)] = None,
    end_step: Annotated[int | None, Query(ge=0, le=MAX_STEP)] = None,
) -> MetricsResponse:
    job_or_404(session, job_id)
    if start_step is not None and end_step is not None and end_step < start_step:
        raise HTTPException(
            422, [{"loc": ["query", "end_step"], "msg": "end_step must be ≥ start_step", "type": "value_error"}]
        )
    if name and any(len(n) > 200 or not n.isprintable() for n in name):
        raise HTTPException(
            422,
            [
                {
                    "loc": ["query", "name"],
                    "msg": "series names are printable text of at most 200 characters",
                    "type": "value_error",
                }
            ],
        )
    metric_rollup.refresh(session, job_id)
    names = list(dict.fromkeys(name)) if name else metric_rollup.series_names(session, job_id)
    series = []
    for n in names:
        s = metric_rollup.query(session, job_id, n, max_points, start_step, end_step)
        series.append(
            MetricSeries(
                name=s.name,
                points=[MetricPointPublic(step=st, value=v) for st, v in s.points],
                total_points=s.total_points,
                downsampled=s.downsampled,
            )
        )
    return MetricsResponse(job_id=job_id, series=series)
