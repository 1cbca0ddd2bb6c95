"""Server-sent events for one job: status, progress, new metric points, checkpoints, end.

Polls the database (every POLL_S) rather than listening to the worker, so it works whichever
host the worker and the API run on. Points live in two seq spaces: events.jsonl's (below
EXTERNAL_SEQ_BASE) and the worker's own (system samples, TensorBoard scalars: from it up), which
grow side by side, so the stream keeps a cursor in each. Resumable: each `metrics` event's id is
`<events seq>:<external seq>`, and a reconnecting EventSource sends it back as Last-Event-ID.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator
from typing import Annotated, Any, cast

from fastapi import APIRouter, Header, Query, Request
from sqlalchemy import text
from sqlmodel import Session, col
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.concurrency import run_in_threadpool

from api.deps import JobId, SessionDep, SettingsDep, job_or_404
from api.models import CheckpointPublic, ErrorDetail, JobPublic
from api.routes.jobs import owner_names, watched
from core import supervision
from core.db import get_engine
from core.metric_rollup import EXTERNAL_SEQ_BASE
from core.settings import Settings
from core.tables import Checkpoint, Job
from trainer.event_types import PROGRESS_COUNTS, PROGRESS_RATES, JobProgress

router = APIRouter(tags=["stream"])
POLL_S = 0.5
MAX_POINTS_PER_EVENT = 5000


def _progress(job: Job) -> JobProgress:
    """The `progress` event: the job row's progress columns, named as the trainer's events name them."""
    progress: dict[str, Any] = {key: getattr(job, key) for key in PROGRESS_COUNTS}
    progress.update({key: _finite_or_none(getattr(job, key)) for key in PROGRESS_RATES})
    return cast(JobProgress, progress)


def _finite_or_none(v: float | None) -> float | None:
    return v if v is not None and math.isfinite(v) else None


class _Cursor:
    """What this stream has already sent."""

    def __init__(self, after_seq: int, after_external: int, after_checkpoint: int) -> None:
        self.status: str | None = None
        self.progress: JobProgress | None = None
        self.seq = after_seq  # events.jsonl's points
        self.external = after_external  # the worker's own points (EXTERNAL_SEQ_BASE and up)
        self.checkpoint_id = after_checkpoint
        self.owners: dict[int, str] = {}  # the job's owner's name, read once (it never changes)

    def _new_points(self, session: Session, job_id: int) -> list[Any]:
        """New points of both seq spaces (each in seq order), moving both cursors."""
        rows = session.execute(
            text(
                "SELECT seq, name, step, value FROM metric_points"
                " WHERE job_id = :j AND seq > :s AND seq < :base ORDER BY seq LIMIT :n"
            ),
            {"j": job_id, "s": self.seq, "base": EXTERNAL_SEQ_BASE, "n": MAX_POINTS_PER_EVENT},
        ).all()
        external = session.execute(
            text(
                "SELECT seq, name, step, value FROM metric_points WHERE job_id = :j AND seq > :e ORDER BY seq LIMIT :n"
            ),
            {"j": job_id, "e": self.external, "n": MAX_POINTS_PER_EVENT},
        ).all()
        if rows:
            self.seq = rows[-1][0]
        if external:
            self.external = external[-1][0]
        return [*rows, *external]

    def poll(self, settings: Settings, job_id: int) -> tuple[list[ServerSentEvent], bool]:
        """One look at the database: the events to send and whether the job has finished."""
        events: list[ServerSentEvent] = []
        with Session(get_engine(settings.resolved_database_url)) as session:
            job = session.get(Job, job_id)
            if job is None:
                return [ServerSentEvent(json.dumps({"detail": "job deleted"}), event="end")], True
            if job.owner_id is not None and job.owner_id not in self.owners:
                self.owners.update(owner_names(session, [job]))
            # As GET /jobs/{id} reads it, silence included: a status event without it hid the page's banner.
            silence = supervision.load(session, [job], settings).get(job_id)
            public = watched(JobPublic.from_row(job, self.owners), silence)
            # "status" carries the whole JobPublic: send it again when anything but progress changes.
            key = json.dumps(
                [
                    public.status.value,
                    public.attempt,
                    public.worker_host,
                    public.error,
                    public.exit_code,
                    public.failed_rank,
                    str(public.started_at),
                    str(public.finished_at),
                    public.supervisor_silence is not None,  # went silent, or heard again (not its minutes)
                ]
            )
            if key != self.status:
                self.status = key
                events.append(ServerSentEvent(public.model_dump_json(), event="status"))
            progress = _progress(job)
            if progress != self.progress:
                self.progress = progress
                events.append(ServerSentEvent(json.dumps(progress), event="progress"))
            rows = self._new_points(session, job_id)
            if rows:
                points = [
                    {"name": n, "step": st, "value": v} for _, n, st, v in rows if v is not None and math.isfinite(v)
                ]
                if points:
                    cursor_id = f"{self.seq}:{self.external}"
                    events.append(ServerSentEvent(json.dumps(points), event="metrics", id=cursor_id))
            for ck in (
                session.query(Checkpoint)
                .filter(col(Checkpoint.job_id) == job_id, col(Checkpoint.id) > self.checkpoint_id)
                .order_by(col(Checkpoint.id))
            ):
                self.checkpoint_id = ck.id
                events.append(ServerSentEvent(CheckpointPublic.from_row(ck).model_dump_json(), event="checkpoint"))
            done = public.status.is_terminal and len(rows) < MAX_POINTS_PER_EVENT  # both spaces drained
            if done:
                events.append(ServerSentEvent(json.dumps({"status": public.status.value}), event="end"))
            return events, done


def _parse_event_id(value: str | None) -> tuple[int, int] | None:
    """`<events seq>:<external seq>` (a bare number, from before: the events seq alone)."""
    if not value or not value.isascii():
        return None
    first, _, second = value.partition(":")
    if not first.lstrip("-").isdigit() or (second and not second.isdigit()):
        return None
    return int(first), int(second) if second else EXTERNAL_SEQ_BASE - 1


def _newest_seqs(session: Session, job_id: int) -> tuple[int, int]:
    row = session.execute(
        text(
            "SELECT max(CASE WHEN seq < :base THEN seq END), max(CASE WHEN seq >= :base THEN seq END)"
            " FROM metric_points WHERE job_id = :j"
        ),
        {"j": job_id, "base": EXTERNAL_SEQ_BASE},
    ).one()
    return (-1 if row[0] is None else int(row[0])), (EXTERNAL_SEQ_BASE - 1 if row[1] is None else int(row[1]))


@router.get(
    "/jobs/{job_id}/stream",
    response_class=EventSourceResponse,
    responses={200: {"content": {"text/event-stream": {}}}, 404: {"model": ErrorDetail}},
)
async def stream_job(
    job_id: JobId,
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    after_seq: Annotated[
        int | None, Query(ge=-1, le=2**62, description="Send metric points after this seq (default: only new ones).")
    ] = None,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID", max_length=48)] = None,
) -> EventSourceResponse:
    await run_in_threadpool(job_or_404, session, job_id)
    after_external = EXTERNAL_SEQ_BASE - 1  # with an explicit after_seq: every point of the other space
    resumed = _parse_event_id(last_event_id)
    if after_seq is None and resumed is not None:
        after_seq, after_external = resumed
    if after_seq is None:
        after_seq, after_external = _newest_seqs(session, job_id)
    checkpoint_after = 0 if after_seq < 0 else 2**62  # a fresh viewer gets every checkpoint; a live one only new ones
    if checkpoint_after:
        checkpoint_after = session.execute(
            text("SELECT coalesce(max(id), 0) FROM checkpoints WHERE job_id = :j"), {"j": job_id}
        ).scalar_one()
    session.close()
    cursor = _Cursor(after_seq, after_external, checkpoint_after)

    async def events() -> AsyncIterator[ServerSentEvent]:
        while True:
            batch, done = await run_in_threadpool(cursor.poll, settings, job_id)
            for event in batch:
                yield event
            if done or await request.is_disconnected():
                return
            await asyncio.sleep(POLL_S)

    return EventSourceResponse(events(), ping=15, headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})
