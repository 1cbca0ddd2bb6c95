"""A job's own Python packages (spec `environment`; worker/environments/): GET /jobs/{id}/environment."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, cast

from fastapi import APIRouter, HTTPException, status

from api.deps import JobId, SessionDep, SettingsDep, job_or_404
from api.models import EnvironmentPackage, ErrorDetail, JobEnvironmentPublic
from core.paths import UnsafePath, run_dir_of
from core.tables import JobEnvironment

router = APIRouter(tags=["environments"])
LOG_TAIL_BYTES = 16_384
ENV_LOG = re.compile(r"^attempt_(\d+)\.environment\.log$")


def _log_tail(run_dir: Path) -> str:
    """The tail of node 0's newest environment log (uv's output), bounded."""
    logs = run_dir / "logs"
    found = sorted(((int(m.group(1)), p) for p in logs.glob("attempt_*.environment.log")
                    if (m := ENV_LOG.match(p.name))), reverse=True) if logs.is_dir() else []  # fmt: skip
    if not found:
        return ""
    with open(found[0][1], "rb") as fh:
        fh.seek(max(0, fh.seek(0, 2) - LOG_TAIL_BYTES))
        return fh.read().decode(errors="replace")


@router.get("/jobs/{job_id}/environment", response_model=JobEnvironmentPublic, responses={404: {"model": ErrorDetail}})
def get_environment(job_id: JobId, session: SessionDep, settings: SettingsDep) -> JobEnvironmentPublic:
    job = job_or_404(session, job_id)
    row = session.get(JobEnvironment, job_id)
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"job {job_id} has no environment (yet)")
    try:
        tail = _log_tail(run_dir_of(job, settings))
    except (UnsafePath, OSError, ValueError):
        tail = ""
    return JobEnvironmentPublic(
        job_id=job_id,
        state=cast(Any, row.state),
        packages=[EnvironmentPackage(**p) for p in row.packages or []],
        own_torch=row.own_torch,
        python=row.python,
        torch=row.torch,
        cached=row.cached,
        prepare_s=row.prepare_s,
        size_bytes=row.size_bytes,
        error=row.error,
        resolved_at=row.resolved_at,
        log_tail=tail,
    )
