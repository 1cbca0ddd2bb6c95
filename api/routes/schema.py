"""The JobSpec JSON Schema, for the dashboard's form and for clients."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from trainer.spec import json_schema

router = APIRouter(tags=["schema"])


@router.get("/schema/job-spec")
def job_spec_schema() -> dict[str, Any]:
    return json_schema()
