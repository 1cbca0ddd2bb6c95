"""Adding a console pattern to a job, running or finished (issue 36): it joins the spec's
`console_metrics.patterns`; a finished job's stored console is replayed with it here (core/console_apply.py),
a running job's worker replays and applies it within a few seconds (worker/console_feed.py)."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, status
from pydantic import BaseModel, Field
from sqlalchemy.orm.attributes import flag_modified

from api.auth import may_change_job
from api.deps import CurrentUser, JobId, SessionDep, SettingsDep, job_or_404
from core import audit, console_apply
from core.console_reader.job import compile_patterns
from core.paths import UnsafePath, run_dir_of
from core.tables import TERMINAL_STATUSES
from trainer.run_dir import RunDir
from trainer.spec import MAX_CONSOLE_PATTERNS, ConsolePattern

router = APIRouter(tags=["metrics"])


class PatternAdded(BaseModel):
    patterns: int = Field(description="The job's console patterns now, this one included.")
    applied: str = Field(description="'stored console': replayed now; 'running job': its worker replays it.")
    points: int = Field(description="Points written from the stored console now (0 for a running job).")


@router.post(
    "/jobs/{job_id}/console-patterns",
    response_model=PatternAdded,
    responses={409: {"description": "Not a script job, or it has the most patterns a job may."}},
)
def add_pattern(
    job_id: JobId, pattern: ConsolePattern, session: SessionDep, settings: SettingsDep, who: CurrentUser
) -> PatternAdded:
    """Read a script job's console with one more pattern (RE2; named groups `value` and `key` or a fixed
    `name`, optionally `step`): its series appear without rerunning the job."""
    job = job_or_404(session, job_id)
    may_change_job(who, job.owner_id, job_id, "job.edit")
    spec = dict(job.spec or {})
    if spec.get("entrypoint") is None:
        raise HTTPException(status.HTTP_409_CONFLICT, "only a script job (an entrypoint) reads its console")
    console = dict(spec.get("console_metrics") or {})
    patterns = [*list(console.get("patterns") or []), pattern.model_dump(exclude_none=True)]
    if len(patterns) > MAX_CONSOLE_PATTERNS:
        raise HTTPException(
            status.HTTP_409_CONFLICT, f"a job has at most {MAX_CONSOLE_PATTERNS} console patterns: submit anew"
        )
    spec["console_metrics"] = {**console, "patterns": patterns}
    job.spec = spec
    flag_modified(job, "spec")
    points = 0
    finished = job.status in TERMINAL_STATUSES
    if finished:
        try:
            run = RunDir(run_dir_of(job, settings))
        except UnsafePath as exc:
            raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
        found = console_apply.points_of(run, max(job.attempt, 1), compile_patterns([patterns[-1]]))
        points = console_apply.write_points(session.connection(), job_id, found)
        console_apply.note_series(run, {p.name for p in found})
    audit.record(session, who, "job.edit", f"job {job_id}", f"console pattern {pattern.regex[:80]!r}")
    session.commit()
    return PatternAdded(patterns=len(patterns), applied="stored console" if finished else "running job", points=points)
