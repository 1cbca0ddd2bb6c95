"""The dashboard's HTML pages (templates in web/templates, JS and CSS in web/static).

Pages only render a shell; the JS in web/static/js fetches everything through the REST API with
the session cookie. Signing in trades the API token (posted in a form, never in a URL) for the
HttpOnly, SameSite=Strict session cookie of api.auth (the sign-in and sign-out pages:
api/routes/session.py). Every page but /login redirects there without a valid session.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Depends, HTTPException, Query, Request, status
from fastapi import Path as PathParam
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from sqlmodel import Session

from api.auth import CSRF_HEADER, app_settings, session_csrf, token_matches
from api.routes.environments import carry_lock
from core import metric_rollup, permissions
from core.artifacts import keys
from core.db import get_engine
from core.resume import derived_name, resume_spec
from core.settings import Settings
from core.tables import Checkpoint, Job
from trainer.spec import BUILTIN_DATA, BUILTIN_LOSSES, BUILTIN_MODELS, BUILTIN_ONLY_FIELDS, JobSpec
from trainer.spec_text import MAX_SPEC_TEXT_BYTES, SpecTextError, load_spec_text

WEB_DIR = Path(__file__).resolve().parents[2] / "web"
templates = Jinja2Templates(directory=str(WEB_DIR / "templates"))
# What the signed-in role may do, per action, to her own targets and others' (core/permissions.py's one
# table): base.html hands it to the pages' JS (web/static/js/me.js), which offer only what works.
templates.env.globals["may_table"] = permissions.for_role

# Pages draw only same-origin scripts and styles; uPlot styles its canvas through the CSSOM,
# which style-src does not restrict. Inline JSON data blocks are not scripts, so they are fine.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'"
)
MAX_YAML_BYTES = MAX_SPEC_TEXT_BYTES  # a spec is a few KB (its args at most 16 KiB); PyYAML takes ~1 s for 64 KB
MAX_ID = 2**31 - 1

router = APIRouter(include_in_schema=False)


def _spec_text_to_json(body: bytes) -> tuple[int, str]:
    """(status, JSON text) for the raw editor's text; CPU-bound, so run in the threadpool."""
    try:
        return 200, json.dumps({"spec": load_spec_text(body)})
    except SpecTextError as exc:
        return 400, json.dumps({"error": str(exc)})


SettingsDep = Annotated[Settings, Depends(app_settings)]


def _static_version() -> str:
    """Changes whenever a static file changes, so browsers never run stale JS after an upgrade."""
    static = WEB_DIR / "static"
    newest = max((p.stat().st_mtime_ns for p in static.rglob("*") if p.is_file()), default=0)
    return format(newest, "x")[-8:]


def page(request: Request, template: str, csrf: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    response = templates.TemplateResponse(
        request, template, {"csrf": csrf, "static_version": _static_version(), **context}, status_code=status_code
    )
    _harden(response)
    return response


def _harden(response: Response) -> None:
    response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    response.headers["Cache-Control"] = "no-store"


def _to_login(request: Request) -> RedirectResponse:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/login?next={quote(target, safe='')}", status_code=status.HTTP_303_SEE_OTHER)


@router.get("/", response_class=HTMLResponse)
def jobspage(request: Request, settings: SettingsDep) -> Response:
    csrf = session_csrf(request, settings)
    if csrf is None:
        return _to_login(request)
    return page(request, "jobs.html", csrf, nav="jobs")


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
def jobpage(request: Request, settings: SettingsDep, job_id: Annotated[int, PathParam(ge=1, le=MAX_ID)]) -> Response:
    csrf = session_csrf(request, settings)
    if csrf is None:
        return _to_login(request)
    with Session(get_engine(settings.resolved_database_url)) as db:
        names = metric_rollup.series_names(db, job_id)
    first = _first_chart(names)
    return page(
        request,
        "job.html",
        csrf,
        nav="jobs",
        job_id=job_id,
        spec_defaults_json=_SPEC_DEFAULTS_JSON,
        series_json=_script_json({"names": names, "first": first}),
        first_chart_query=urlencode({"name": first, "max_points": JOB_MAX_POINTS}, doseq=True) if first else None,
    )


JOB_MAX_POINTS = 2000  # job_charts.js's maxPoints


def _first_chart(names: list[str]) -> list[str]:
    """The loss chart's series (train/loss, val/loss, …), which the page reads first and draws before the
    rest (job_charts.js: chartKey, byRole); the same order, so the preloaded URL is the one it asks for."""

    def key(name: str) -> str:
        parts = name.split("/")
        return "/".join(parts[1:]) if len(parts) > 1 and parts[0] in ("train", "val") else name

    def role(name: str) -> tuple[int, str]:
        return (0 if name.startswith("train/") else 1 if name.startswith("val/") else 2, name)

    return sorted((n for n in names if key(n) == "loss"), key=role)


# The job page's configuration panel lists what differs from these first (and, for a script job,
# leaves out the fields only the built-in trainer reads).
_SPEC_DEFAULTS_JSON = (
    json.dumps(
        {"defaults": JobSpec.model_construct().model_dump(mode="json"), "builtin_only": list(BUILTIN_ONLY_FIELDS)}
    )
    .replace("<", "\\u003c")
    .replace(">", "\\u003e")
    .replace("&", "\\u0026")
)


@router.get("/sweeps", response_class=HTMLResponse)
def sweepspage(request: Request, settings: SettingsDep) -> Response:
    """The sweeps, newest first (web/static/js/sweep.js, issue 24)."""
    csrf = session_csrf(request, settings)
    if csrf is None:
        return _to_login(request)
    return page(request, "sweep.html", csrf, nav="sweeps", sweep_id=None)


@router.get("/sweeps/{sweep_id}", response_class=HTMLResponse)
def sweeppage(
    request: Request, settings: SettingsDep, sweep_id: Annotated[int, PathParam(ge=1, le=MAX_ID)]
) -> Response:
    """One sweep: its trials table, charts and actions (web/static/js/sweep.js, issue 24)."""
    csrf = session_csrf(request, settings)
    if csrf is None:
        return _to_login(request)
    return page(request, "sweep.html", csrf, nav="sweeps", sweep_id=sweep_id)


@router.get("/hosts", response_class=HTMLResponse)
def hostspage(request: Request, settings: SettingsDep) -> Response:
    csrf = session_csrf(request, settings)
    if csrf is None:
        return _to_login(request)
    return page(request, "hosts.html", csrf, nav="hosts")


@router.get("/webhooks", response_class=HTMLResponse)
def webhookspage(request: Request, settings: SettingsDep) -> Response:
    """The signed-in user's own webhooks (web/static/js/webhooks.js, issue 37 part 5); what it offers follows
    core/permissions.py (a viewer adds none; the nav links it for the roles that may add one)."""
    csrf = session_csrf(request, settings)
    if csrf is None:
        return _to_login(request)
    return page(request, "webhooks.html", csrf, nav="webhooks")


COMPARE_MAX_RUNS = 10  # compare.js's MAX_RUNS
COMPARE_MAX_POINTS = 700  # compare.js's MAX_POINTS


def _compare_preloads(ids: str | None, metric: str | None) -> list[str]:
    """The API reads compare.js makes first, to start with the page (same URLs, byte for byte)."""
    wanted: list[int] = []
    for part in re.split(r"[\s,]+", ids or ""):
        if part.isdigit() and 0 < int(part) <= MAX_ID and int(part) not in wanted:
            wanted.append(int(part))
    name = metric or "train/loss"
    if len(name) > 200 or not name.isprintable():
        return []
    query = urlencode({"name": name, "max_points": COMPARE_MAX_POINTS})
    return [u for i in wanted[:COMPARE_MAX_RUNS] for u in (f"/api/jobs/{i}", f"/api/jobs/{i}/metrics?{query}")]


@router.get("/compare", response_class=HTMLResponse)
def compare_page(
    request: Request,
    settings: SettingsDep,
    ids: Annotated[str | None, Query(max_length=2000)] = None,
    metric: Annotated[str | None, Query(max_length=200)] = None,
) -> Response:
    csrf = session_csrf(request, settings)
    if csrf is None:
        return _to_login(request)
    return page(request, "compare.html", csrf, nav="compare", preloads=_compare_preloads(ids, metric))


def _global_batch(spec: dict[str, Any]) -> int | None:
    try:
        return JobSpec.model_validate(spec).global_batch_size
    except ValueError:
        return None


def _prefill(
    settings: Settings, clone: int | None, resume: int | None, resume_info: dict[str, Any]
) -> tuple[dict[str, Any] | None, str | None]:
    """The spec a new job starts from: a copy of another job's, or one resuming from a checkpoint
    (`resume_info` gets the checkpoint's step and global batch, for the form's warnings)."""
    if clone is None and resume is None:
        return None, None
    with Session(get_engine(settings.resolved_database_url)) as db:
        if resume is not None:
            checkpoint = db.get(Checkpoint, resume)
            job = db.get(Job, checkpoint.job_id) if checkpoint else None
            if checkpoint is None or job is None:
                raise HTTPException(status.HTTP_404_NOT_FOUND, f"checkpoint {resume} not found")
            # Its key (core/resume_source.py): the same file on every host, in its runs dir or the store.
            spec, how = resume_spec(
                {**job.spec, "name": job.name},
                total_steps=job.total_steps,
                checkpoint_step=checkpoint.step,
                resume_from=keys.job_key(int(job.id or 0), checkpoint.path),
            )
            # A script chooses its own batch: no global-batch warning for it.
            batch = None if job.spec.get("entrypoint") else _global_batch(job.spec)
            resume_info.update(step=checkpoint.step, global_batch=batch)
            return spec, f"Resuming job {job.name} (#{job.id}) from its checkpoint at step {checkpoint.step}: {how}."
        job = db.get(Job, clone)
        if job is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"job {clone} not found")
        spec = dict(job.spec)
        spec["name"] = _derived_name(job.name, "copy")
        packages = carry_lock(db, job, spec)  # the clone installs the source's locked packages (issue 28)
        return spec, f"A copy of job {job.name} (#{job.id}): edit it and submit." + (f" {packages}" if packages else "")


def _script_json(value: Any) -> str:
    """JSON safe inside <script type="application/json">: no '</script>' can close the element early."""
    return json.dumps(value).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _derived_name(name: str, suffix: str) -> str:
    return derived_name(name, suffix)


@router.get("/new", response_class=HTMLResponse)
def new_job_page(
    request: Request,
    settings: SettingsDep,
    clone: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
    resume: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
) -> Response:
    csrf = session_csrf(request, settings)
    if csrf is None:
        return _to_login(request)
    resume_info: dict[str, Any] = {}
    spec, note = _prefill(settings, clone, resume, resume_info)
    builtins = {
        "models": BUILTIN_MODELS,
        "data": BUILTIN_DATA,
        "losses": BUILTIN_LOSSES,
        "builtin_only": BUILTIN_ONLY_FIELDS,  # the form hides them for a script job
    }
    return page(
        request,
        "new.html",
        csrf,
        nav="new",
        prefill_json=_script_json(spec),
        prefill_note=note,
        builtins_json=_script_json(builtins),
        resume_json=_script_json(resume_info or None),
    )


@router.post("/ui/parse-spec")
async def parse_spec_text(request: Request, settings: SettingsDep) -> Response:
    """YAML (or JSON) text from the raw editor → a JSON object, so the browser needs no YAML parser.

    Only parses (trainer/spec_text.py, the loader the CLI and the trainer use); validating is POST /api/jobs's job.
    """
    csrf = session_csrf(request, settings)
    if csrf is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "sign in first")
    if not token_matches(request.headers.get(CSRF_HEADER, ""), csrf):
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"missing or wrong {CSRF_HEADER} header")
    body = await request.body()
    if len(body) > MAX_YAML_BYTES:
        raise HTTPException(status.HTTP_413_REQUEST_ENTITY_TOO_LARGE, "spec text too large")
    code, text = await run_in_threadpool(_spec_text_to_json, body)  # parsing YAML must not stall the event loop
    return Response(text, status_code=code, media_type="application/json")
