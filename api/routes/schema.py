"""What clients read instead of copying it: the JobSpec JSON Schema (the dashboard's form) and GET /api/meta
(job state sets and the limits the routes enforce; the dashboard and other clients read them here)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from api.models import Meta, PointsLimit, ServerLimits, StateSets
from api.routes import jobs, logs, metrics
from core.job_state import published_sets
from trainer.spec import json_schema

router = APIRouter(tags=["schema"])


@router.get("/schema/job-spec")
def job_spec_schema() -> dict[str, Any]:
    return json_schema()


@router.get("/meta", response_model=Meta)
def meta() -> Meta:
    """Job state sets (which states are finished, live, hold capacity, can be cancelled) and the limits the
    routes enforce. Constant for a running server: fetch once per page."""
    return Meta(
        states=StateSets.model_validate(published_sets()),
        limits=ServerLimits(
            jobs_page=jobs.MAX_PAGE,
            metric_names=metrics.MAX_NAMES,
            metric_name_chars=metrics.MAX_NAME_CHARS,
            metric_points=PointsLimit(min=metrics.MIN_POINTS, max=metrics.MAX_POINTS, default=metrics.DEFAULT_POINTS),
            log_bytes=logs.MAX_CHUNK_BYTES,
        ),
    )
