"""Submit, list, show and cancel jobs."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, HTTPException, Query, Request, Response, status
from pydantic import BaseModel
from sqlalchemy import String, cast, func
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from api import submit_policy
from api.auth import may_change_job
from api.deps import CurrentUser, JobId, SessionDep, SettingsDep, Submitter, job_or_404
from api.models import ErrorDetail, JobDetail, JobPage, JobPublic, StartEstimate, TimeBreakdown, TransitionPublic
from api.models_ranks import RanksView
from api.routes import environments
from core import (
    audit,
    bundles,
    hosts,
    job_sort,
    jobs,
    quota_gate,
    quotas,
    start_estimate,
    supervision,
    team_pass,
    time_breakdown,
    wake,
)
from core.db import get_read_engine
from core.placement_types import GPU, SLOT, kinds_in_pool
from core.settings import Settings
from core.tables import Job, JobStatus, JobTransition, User
from core.users import Principal
from trainer.run_dir import job_run_dir
from trainer.spec import JobSpec

log = logging.getLogger(__name__)
router = APIRouter(tags=["jobs"])
MAX_PAGE, DEFAULT_PAGE = 500, 50  # GET /api/jobs `limit` (published by GET /api/meta)


IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        pattern=r"^[\x21-\x7e]{1,200}$",
        description="Any unique string (a UUID): a retry with the same key and spec returns the job it created.",
    ),
]


@router.post(
    "/jobs",
    status_code=status.HTTP_201_CREATED,
    response_model=JobPublic,
    responses={
        200: {"description": "A retry: the job this Idempotency-Key already created."},
        409: {"model": ErrorDetail, "description": "The Idempotency-Key was used with another spec."},
        422: {"description": "The spec is invalid or refused by this server."},
        429: {"description": "Too many jobs queued or running (RANKZERO_MAX_ACTIVE_JOBS); retry after Retry-After."},
    },
)
def submit_job(
    spec: JobSpec,
    session: SessionDep,
    settings: SettingsDep,
    response: Response,
    who: Submitter,
    idempotency_key: IdempotencyKey = None,
) -> JobPublic:
    """Queue a training job, owned by the caller. The body is a JobSpec (GET /api/schema/job-spec); unknown
    fields are refused. Refused (422) when it could never fit the caller's quota, 429 past her queued quota."""
    if idempotency_key and (done := jobs.by_idempotency_key(session, idempotency_key)) is not None:
        return _replay(session, who, done, spec, settings, response)
    _check_quota(session, settings, who, spec)
    check_priority_ceiling(session, who, spec.priority)
    try:
        spec = submit_policy.apply(spec, settings)
    except submit_policy.QuotaExceeded as exc:
        raise HTTPException(
            status.HTTP_429_TOO_MANY_REQUESTS,
            [{"loc": list(exc.loc), "msg": exc.msg, "type": "quota_exceeded"}],
            headers={"Retry-After": str(exc.retry_after_s)},
        ) from None
    except submit_policy.SpecRefused as exc:
        raise HTTPException(422, [{"loc": list(exc.loc), "msg": exc.msg, "type": "value_error"}]) from None
    _check_resume_owner(session, settings, who, spec)
    environments.check_lock_from(session, spec)
    try:
        quota_gate.admit(session, settings, who.user_id)  # her row locked until the job's commit
    except quota_gate.OverQuota as exc:
        raise _over_queued(str(exc)) from None
    try:
        job = jobs.create(
            session,
            spec.name,
            spec.model_dump(mode="json"),
            spec.pool or settings.queue,  # submit_policy resolved it: the spec's own pool, else the default
            idempotency_key,
            owner_id=who.user_id,
            before_commit=lambda row: audit.record(session, who, "job.submit", f"job {row.id}", row.name),
        )
    except IntegrityError:
        session.rollback()
        winner = jobs.by_idempotency_key(session, idempotency_key) if idempotency_key else None
        if winner is None:  # not a concurrent retry with the same key: a real integrity error
            raise
        return _replay(session, who, winner, spec, settings, response)
    # Committed: core.jobs.create has woken the scheduler, which places it (no message to send from here).
    public = JobPublic.from_row(job, {who.user_id: who.name})
    public.environment_estimate = environments.estimate(spec, settings)  # a job's own torch: how big (issue 28)
    return public


def _check_quota(session: Session, settings: Settings, who: Principal, spec: JobSpec) -> None:
    """422 when the job could never fit the caller's quota; 429 when she has her quota of jobs queued."""
    user = session.get(User, who.user_id)
    if user is None:
        return
    quota = team_pass.quota_of(user, settings)
    kinds = _kinds_in_pool(settings, spec) if quota != quotas.Quota(quota.name) else frozenset((GPU, SLOT))
    if (never := quotas.never_within(spec, quota, GPU in kinds, SLOT in kinds)) is not None:
        raise HTTPException(422, [{"loc": ["body"], "msg": never, "type": "quota_exceeded"}])
    # A first look, so a spec is not checked at length for nothing; the decision is quota_gate.admit's,
    # under the user's lock, in the transaction that inserts the job.
    if (over := quotas.over_queued(quota_gate.queued_of(session, who.user_id), quota)) is not None:
        raise _over_queued(over)


def _kinds_in_pool(settings: Settings, spec: JobSpec) -> frozenset[str]:
    """GPU and/or SLOT: what the job may take on its pool's registered hosts (an 'auto' job on a CPU-only pool takes
    slots only, so its owner's GPU quota does not count it)."""
    pool = spec.pool or settings.queue
    engine = get_read_engine(settings.resolved_database_url)
    views = [row.view() for row in hosts.read_all(engine, settings.resolved_stale_after_s) if row.pool == pool]
    return kinds_in_pool(spec, views)


def check_priority_ceiling(session: Session, who: Principal, priority: int) -> None:
    """403 naming her ceiling when `priority` is above the caller's (issue 34: admins set each member's;
    core/quotas.py DEFAULT_MAX_PRIORITY otherwise); admins have none."""
    user = session.get(User, who.user_id)
    ceiling = quotas.ceiling_of(who.role, user.max_priority if user is not None else None)
    if (why := quotas.over_ceiling(who.name, priority, ceiling)) is not None:
        raise HTTPException(status.HTTP_403_FORBIDDEN, why)


def _over_queued(message: str) -> HTTPException:
    return HTTPException(
        status.HTTP_429_TOO_MANY_REQUESTS,
        [{"loc": ["body"], "msg": message, "type": "quota_exceeded"}],
        headers={"Retry-After": "60"},
    )


def _check_resume_owner(session: Session, settings: Settings, who: Principal, spec: JobSpec) -> None:
    """Members resume only their own jobs' checkpoints (admins any): 403 naming the role otherwise. The job is
    the one whose standard run dir (`job_<id>`) holds the checkpoint, at any depth below it (`work/sub/x.pt`
    too); a file elsewhere in the runs dir has no owner to check."""
    if spec.resume_from is None or who.role == "admin":
        return
    runs = settings.resolved_runs_dir.resolve()
    job_id = resume_owner_job(runs / spec.resume_from, runs)  # a key inside the runs dir, made by submit_policy
    job = session.get(Job, job_id) if job_id is not None else None
    if job_id is not None and job is not None:
        may_change_job(who, job.owner_id, job_id, "job.resume")


def resume_owner_job(path: Path, runs_dir: Path) -> int | None:
    """The id of the job whose run dir (`<runs>/job_<id>`) holds `path` at any depth, or None (pure)."""
    try:
        first = path.relative_to(runs_dir).parts[0]
    except (ValueError, IndexError):
        return None
    found = re.fullmatch(r"job_(\d{1,10})", first)
    if found is None or job_run_dir(runs_dir, int(found[1])).name != first:  # `job_007` is not job 7's
        return None
    return int(found[1])


def owner_names(session: Session, jobs_: list[Job]) -> dict[int, str]:
    """user id -> name for the owners of `jobs_` (one small query)."""
    ids = {j.owner_id for j in jobs_ if j.owner_id is not None}
    if not ids:
        return {}
    return {uid: name for uid, name in session.execute(select(User.id, User.name).where(col(User.id).in_(ids))).all()}


def public_job(session: Session, job: Job) -> JobPublic:
    """One job as every route answers it, its owner's name included (JobPublic.from_row alone leaves it null)."""
    return JobPublic.from_row(job, owner_names(session, [job]))


def _replay(
    session: Session, who: Principal, job: Job, spec: JobSpec, settings: Settings, response: Response
) -> JobPublic:
    """The answer to a retried submit: the job the key created, if the caller created it with the same spec.
    Keys are unique server-wide: another user's key is a 409, never her job passed off as the caller's."""
    if job.owner_id != who.user_id:
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            "this Idempotency-Key was used by another user's submit: use a new key (a random UUID) for each job",
        )
    try:
        incoming = submit_policy.check_pool(submit_policy.check_resume_from(spec, settings), settings)
        incoming = incoming.model_dump(mode="json")
    except submit_policy.SpecRefused:
        incoming = None
    if incoming != job.spec:
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            f"this Idempotency-Key already created job {job.id} with another spec: use a new key for a new job",
        )
    response.status_code = status.HTTP_200_OK
    response.headers["Idempotent-Replayed"] = "true"
    return public_job(session, job)


async def _read_session(request: Request) -> AsyncIterator[Session]:
    """An autocommit session (core/db.py: no BEGIN / ROLLBACK round trips) for the GET routes dashboards poll.

    Opened and closed on the event loop, as neither does I/O (the connection is taken at the first
    statement, in the route's thread, and an autocommit connection goes back without a ROLLBACK): a sync
    dependency would cost two more hops through the thread pool per request, each a wait for the GIL
    on a busy server."""
    settings: Settings = request.app.state.settings
    session = Session(get_read_engine(settings.resolved_database_url))
    try:
        yield session
    finally:
        session.close()


ReadSessionDep = Annotated[Session, Depends(_read_session)]


def _json(model: BaseModel) -> Response:
    """`model` as the response, serialized once: FastAPI would dump it, validate the dump against the
    response_model again and encode that (three passes; the route's response_model still documents it)."""
    return Response(model.model_dump_json(), media_type="application/json")


@router.get("/jobs", response_model=JobPage)
def list_jobs(  # noqa: PLR0913 (one parameter per filter)
    session: ReadSessionDep,
    who: CurrentUser,
    settings: SettingsDep,
    status_: Annotated[
        list[JobStatus] | None, Query(alias="status", description="Only jobs in this status (repeatable).")
    ] = None,
    name: Annotated[
        str | None,
        Query(max_length=100, pattern=r"^[A-Za-z0-9._-]*$", description="Only jobs whose name contains this text."),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = DEFAULT_PAGE,
    offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
    owner: Annotated[
        str | None, Query(max_length=40, pattern=r"^[a-z][a-z0-9._-]*$", description="Only this user's jobs.")
    ] = None,
    mine: Annotated[bool, Query(description="Only the caller's jobs.")] = False,
    archived: Annotated[
        bool | None, Query(description="Archived jobs only (true), or all (omit: archived are hidden unless false).")
    ] = None,
    tag: Annotated[
        str | None, Query(max_length=40, pattern=r"^[A-Za-z0-9._:-]+$", description="Only jobs with this tag.")
    ] = None,
    sort: Annotated[
        str | None,
        Query(
            max_length=220,
            description="Order: created (default -created: newest first), name, status, step, loss, param:NAME "
            "(a spec params value) or metric:NAME (a series' latest value); a leading - for descending. Jobs "
            "without the value come last.",
        ),
    ] = None,
    metrics: Annotated[
        list[str] | None,
        Query(
            max_length=job_sort.MAX_METRIC_COLUMNS,
            description="Series (repeatable) whose latest value each job carries in `metrics`: the list's columns.",
        ),
    ] = None,
) -> Response:
    """Jobs, newest first unless `sort` says otherwise. Archived jobs are hidden unless `archived=true`."""
    try:
        order = job_sort.order_by(job_sort.parse_sort(sort), session.get_bind().dialect.name)
        columns = job_sort.parse_metric_columns(metrics or [])
    except job_sort.BadSort as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from exc
    query = select(Job)
    if status_:
        query = query.where(col(Job.status).in_(status_))
    if name:
        query = query.where(col(Job.name).contains(name, autoescape=True))
    if mine:
        query = query.where(Job.owner_id == who.user_id)
    elif owner:
        query = query.where(col(Job.owner_id).in_(select(User.id).where(User.name == owner)))
    query = query.where(col(Job.archived).is_(bool(archived)))
    if tag:  # the quoted tag in the JSON text: exact, as a tag holds no quote (core/housekeeping.py)
        query = query.where(cast(Job.tags, String).contains(f'"{tag}"', autoescape=True))
    # The page and the total in one statement (the count an uncorrelated subquery, evaluated once; a
    # window count would materialise every matching row); only a page past the end, which has no row to
    # carry the total, counts separately.
    count = select(func.count()).select_from(query.subquery())
    page = session.execute(
        query.add_columns(count.scalar_subquery().label("total")).order_by(*order).limit(limit).offset(offset)
    ).all()
    total = page[0][1] if page else session.exec(count).one()
    owners = owner_names(session, [job for job, _ in page])
    silent = supervision.load(session, [job for job, _ in page], settings)
    items = [watched(JobPublic.from_row(job, owners), silent.get(job.id or 0)) for job, _ in page]
    if columns:
        latest = job_sort.latest_metrics(session, [item.id for item in items], columns)
        items = [item.model_copy(update={"metrics": latest.get(item.id, {})}) for item in items]
    return _json(JobPage.model_construct(items=items, total=total, limit=limit, offset=offset))


@router.get("/jobs/{job_id}", response_model=JobDetail, responses={404: {"model": ErrorDetail}})
def get_job(job_id: JobId, session: ReadSessionDep, settings: SettingsDep) -> Response:
    job = job_or_404(session, job_id)
    rows = session.exec(
        select(JobTransition).where(JobTransition.job_id == job_id).order_by(col(JobTransition.id))
    ).all()
    # Built from values validated already (JobPublic, TransitionPublic), so not validated again.
    silence = supervision.load(session, [job], settings).get(job_id)  # nothing watching it, said so
    fields: dict[str, Any] = {
        **dict(watched(JobPublic.from_row(job, owner_names(session, [job])), silence)),
        "transitions": [TransitionPublic.from_row(r) for r in rows],
        "time_breakdown": TimeBreakdown.model_construct(**time_breakdown.load(session, job).as_dict()),
        "start_estimate": _start_estimate(session, job, settings),
        "ranks": RanksView.of(job),
        **_code_summary(job.spec, settings),
    }
    detail = JobDetail.model_construct(**fields)
    return _json(detail)


def watched(item: JobPublic, silence: supervision.Silence | None) -> JobPublic:
    """The job as read, saying so when nothing has watched it for a while (core/supervision.py)."""
    if silence is None:
        return item
    return item.model_copy(update={"supervisor_silent_s": silence.silent_s, "supervisor_silence": silence.sentence()})


def _start_estimate(session: Session, job: Job, settings: Settings) -> StartEstimate | None:
    # a requeued Slurm job waits in Slurm's queue (its Slurm job id kept): rankzero's hosts do not place it
    if job.status != JobStatus.queued or job.placement or job.id is None or job.backend_job_id:
        return None
    pool = job.queue or settings.queue
    found = start_estimate.load(session, pool, settings.resolved_stale_after_s, default_pool=settings.queue).get(job.id)
    return StartEstimate.model_validate(found.as_dict(time.time())) if found else None


def _code_summary(spec: dict, settings: Settings) -> dict[str, int]:
    """code_bytes / code_files of the job's bundle (one small read), when it has one still stored."""
    code = spec.get("code") if isinstance(spec, dict) else None
    try:
        found = bundles.manifest(settings, code, paths=False) if isinstance(code, str) else None
    except bundles.BundleError:
        found = None
    return {"code_bytes": found.bytes, "code_files": found.files} if found else {}


@router.post(
    "/jobs/{job_id}/cancel",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=JobPublic,
    responses={404: {"model": ErrorDetail}, 409: {"model": ErrorDetail}},
)
def cancel_job(job_id: JobId, session: SessionDep, who: CurrentUser) -> JobPublic:
    """queued → cancelled at once; starting/running → cancelling (the worker stops the ranks); finished → 409.
    Members cancel their own jobs; admins any (403 otherwise)."""
    for _ in range(5):  # the worker may move the job between our read and our conditional update
        job = job_or_404(session, job_id)
        may_change_job(who, job.owner_id, job_id, "job.cancel")
        current = job.status
        if current.is_terminal:
            raise HTTPException(status.HTTP_409_CONFLICT, f"job {job_id} already {current.value}; nothing to cancel")
        if current is JobStatus.cancelling:
            return public_job(session, job)
        target = JobStatus.cancelled if current is JobStatus.queued else JobStatus.cancelling
        if jobs.transition(session, job_id, target, expect=current, detail=f"cancel requested by {who.name}"):
            audit.record(session, who, "job.cancel", f"job {job_id}", f"was {current.value}")
            session.commit()
            wake.after_commit(session.get_bind().engine)  # a supervisor sleeping on commits sees it now
            session.refresh(job)
            return public_job(session, job)
        session.rollback()
        session.expire_all()
    raise HTTPException(status.HTTP_409_CONFLICT, f"job {job_id} keeps changing state; try again")
