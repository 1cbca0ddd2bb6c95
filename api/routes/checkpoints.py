"""A job's checkpoints, and downloading one: from the run dir (never from outside it), else from the
artifact store, where a host that does not share the API's runs dir uploaded it (core/artifacts)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, HTTPException, status
from fastapi.responses import Response, StreamingResponse
from sqlmodel import col, select

from api.deps import CheckpointId, JobId, SessionDep, SettingsDep, job_or_404
from api.models import CheckpointPublic, ErrorDetail
from api.routes.artifacts import stream_artifact, stream_open_file
from core import artifacts
from core.artifacts import keys
from core.paths import UnsafePath, inside_runs_dir, open_in_runs_dir, run_dir_of
from core.tables import Checkpoint

router = APIRouter(tags=["checkpoints"])


@router.get(
    "/jobs/{job_id}/checkpoints", response_model=list[CheckpointPublic], responses={404: {"model": ErrorDetail}}
)
def list_checkpoints(job_id: JobId, session: SessionDep) -> list[CheckpointPublic]:
    job_or_404(session, job_id)
    rows = session.exec(
        select(Checkpoint).where(Checkpoint.job_id == job_id).order_by(col(Checkpoint.step), col(Checkpoint.id))
    ).all()
    return [CheckpointPublic.from_row(r) for r in rows]


@router.get(
    "/checkpoints/{checkpoint_id}/download",
    response_class=StreamingResponse,
    responses={200: {"content": {"application/octet-stream": {}}}, 404: {"model": ErrorDetail}},
)
def download_checkpoint(checkpoint_id: CheckpointId, session: SessionDep, settings: SettingsDep) -> Response:
    row = session.get(Checkpoint, checkpoint_id)
    if row is None:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND, f"no checkpoint {checkpoint_id}: list them with GET /api/jobs/{{id}}/checkpoints"
        )
    job = job_or_404(session, row.job_id)
    runs = settings.resolved_runs_dir
    try:
        run_dir = run_dir_of(job, settings)
        path = inside_runs_dir(row.path, runs, base=run_dir)
    except UnsafePath as exc:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND, f"checkpoint {checkpoint_id} is not downloadable: {exc}"
        ) from None
    filename = f"job{row.job_id}_{Path(row.path).name}"
    try:  # no link followed, never a FIFO: the job may have swapped one in since the check
        fh = open_in_runs_dir(path, runs)
    except UnsafePath as exc:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND, f"checkpoint {checkpoint_id} is not downloadable: {exc}"
        ) from None
    except OSError:  # gone here (rotated, or shipped to the store)
        fh = None
    if fh is None:
        try:
            key = keys.job_key(row.job_id, keys.shipped_path(row.path))
        except keys.BadKey:
            key = None
        if key is not None and artifacts.find(settings, key) is not None:  # uploaded to the store
            streamed = stream_artifact(settings, key, filename)
            streamed.headers["X-Checkpoint-SHA256"] = row.sha256  # as for a file on disk
            return streamed
        raise HTTPException(
            status.HTTP_404_NOT_FOUND, f"checkpoint {checkpoint_id}'s file is gone (rotated by keep_last?)"
        )
    return stream_open_file(fh, filename, "application/octet-stream", {"X-Checkpoint-SHA256": row.sha256})
