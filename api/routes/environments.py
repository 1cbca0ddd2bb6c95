"""A job's own Python packages (spec `environment`; worker/environments/): GET /jobs/{id}/environment; what
a clone carries (`carry_lock`: the source's lock, spec `environment.lock_from`); what submit checks and says
(`check_lock_from`; `estimate`: the size of a job's own torch)."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Any, cast

from fastapi import APIRouter, HTTPException, status
from sqlmodel import Session

from api.deps import JobId, SessionDep, SettingsDep, job_or_404
from api.models import EnvironmentEstimate, EnvironmentPackage, ErrorDetail, JobEnvironmentPublic
from core import run_files
from core.bundles.format import archive_path
from core.environments import bundle_file, own_torch, requirements_in, service_torch
from core.job_state import TERMINAL
from core.paths import UnsafePath, run_dir_of
from core.settings import Settings
from core.tables import Job, JobEnvironment
from trainer.spec import JobSpec

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
    with run_files.open_file(found[0][1], "rb", run_dir) as fh:  # the job's link or FIFO is not followed
        fh.seek(max(0, fh.seek(0, 2) - LOG_TAIL_BYTES))
        return fh.read(LOG_TAIL_BYTES).decode(errors="replace")


@router.get("/jobs/{job_id}/environment", response_model=JobEnvironmentPublic, responses={404: {"model": ErrorDetail}})
def get_environment(job_id: JobId, session: SessionDep, settings: SettingsDep) -> JobEnvironmentPublic:
    job = job_or_404(session, job_id)
    row = session.get(JobEnvironment, job_id)
    if row is None and job.spec.get("environment"):  # its first start prepares it: nothing to show yet
        return JobEnvironmentPublic(job_id=job_id, state="waiting", packages=[], own_torch=False, python=None,
                                    torch=None, cached=False, prepare_s=None, size_bytes=None, error=None,
                                    resolved_at=None, log_tail="")  # fmt: skip
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"job {job_id} names no environment")
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


def carry_lock(db: Session, source: Job, spec: dict[str, Any]) -> str | None:
    """A clone of `source` installs exactly its locked packages: `spec` (the clone's, a copy of the source's) gets
    `environment.lock_from` = the source when it has a lock (else keeps the source's own lock_from, if any). The
    words for the page's note, or None when the job names no environment."""
    env = spec.get("environment")
    if not isinstance(env, dict):
        return None
    row = db.get(JobEnvironment, source.id)
    if row is not None and row.lock is not None:
        spec["environment"] = {**env, "lock_from": source.id}
    lock_from = spec["environment"].get("lock_from")
    if lock_from is None:
        return f"Its packages will be resolved afresh (job #{source.id} has no lock yet)."
    return (
        f"Its packages keep the versions job #{lock_from} locked (environment.lock_from); remove lock_from to "
        "resolve them afresh."
    )


def check_lock_from(db: Session, spec: JobSpec) -> None:
    """422 when `environment.lock_from` names a job whose lock can never be had: no such job, a job without an
    environment, or one that ended without a lock (a queued or running one may still record it)."""
    source = spec.environment.lock_from if spec.environment is not None else None
    if source is None:
        return
    job = db.get(Job, source)
    why = None
    if job is None:
        why = f"there is no job {source}"
    elif not job.spec.get("environment"):
        why = f"job {source} names no environment, so it has no lock"
    elif job.status in TERMINAL and ((row := db.get(JobEnvironment, source)) is None or row.lock is None):
        why = f"job {source} ended without a lock (its environment was never prepared)"
    if why is not None:
        raise HTTPException(
            422,
            [{"loc": ["body", "environment", "lock_from"], "type": "value_error",
              "msg": f"environment.lock_from: {why}; remove lock_from to resolve the requirements afresh"}],
        )  # fmt: skip


def estimate(spec: JobSpec, settings: Settings) -> EnvironmentEstimate | None:
    """The size of the full environment a job asking for another torch gets (None: it asks for none): from its
    `packages` and its requirements file in the bundle (core/environments.py says how the figure is made)."""
    env = spec.environment
    if env is None:
        return None
    asked = list(env.packages)
    if env.requirements and spec.code:
        with contextlib.suppress(ValueError):  # not a bundle ref (the spec refuses it), unreadable text
            text = bundle_file(archive_path(settings, spec.code), env.requirements)
            asked += requirements_in(text or "", env.requirements)  # unreadable: the job's start says why
    found = own_torch(asked, service_torch())
    if found is None:
        return None
    return EnvironmentEstimate(own_torch=True, requirements=found.requirements, service_torch=found.service_torch,
                               size_bytes=found.size_bytes, basis=found.basis, note=found.note())  # fmt: skip
