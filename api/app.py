"""The FastAPI application factory: `create_app(settings)`.

Migrates the database on creation (so every way of starting the API, tests included, runs on the
newest schema), mounts the REST routes under /api behind auth, and the dashboard (api/routes/ui.py
and web/static) when those are present. Around every route, outermost first: forwarded headers
from trusted proxies only, a trusted-Host check (400 for any other Host: DNS rebinding; the
TestClient's `testserver` only in-process), per-client limits (wrong tokens throttled, SSE streams
capped: api/client_limits.py) and the request limits of api/limits.py.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from urllib.parse import urlsplit

from fastapi import APIRouter, Depends, FastAPI
from fastapi.staticfiles import StaticFiles
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from api import docs, errors
from api.auth import require_auth
from api.client_limits import ClientLimitsMiddleware, FailureWindow, HostCheckMiddleware
from api.limits import RequestLimitsMiddleware
from api.routes import (
    artifacts,
    audit,
    checkpoints,
    code,
    console_patterns,
    environments,
    health,
    hosts,
    housekeeping,
    jobs,
    logs,
    metrics,
    operations,
    outputs,
    priority,
    prometheus,
    schema,
    stream,
    sweeps,
    users,
    webhooks,
    workers,
)
from core import artifacts as artifact_store
from core import migrate
from core.artifacts import sharing
from core.settings import LOOPBACK_HOSTS, Settings, get_settings

WEB_STATIC = Path(__file__).resolve().parent.parent / "web" / "static"
API_PREFIX = "/api"
WILDCARD_BINDS = {"0.0.0.0", "::", ""}


def trusted_hosts(settings: Settings) -> list[str]:
    """Host header values the API answers: loopback names, the bind host, the host of RANKZERO_API_URL
    (the name workers use to reach it), RANKZERO_ALLOWED_HOSTS."""
    names = {*LOOPBACK_HOSTS, *([] if settings.host in WILDCARD_BINDS else [settings.host])}
    api_url_host = urlsplit(getattr(settings, "api_url", None) or "").hostname
    if api_url_host:
        names.add(api_url_host)
    names.update(h.strip().lower() for h in settings.allowed_hosts.split(",") if h.strip())
    # IPv6 literals arrive in brackets (Host: [::1]:8000).
    return sorted(f"[{n}]" if ":" in n and not n.startswith("[") else n for n in names)


def _private_data_dir(settings: Settings) -> None:
    """The data dir 0700 and the SQLite files in it 0600, whoever created them and whatever the umask."""
    settings.ensure_data_dir()
    for path in settings.data_dir.glob("*.db*"):
        if path.is_file() and path.stat().st_mode & 0o077:
            path.chmod(0o600)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    settings.token()  # a weak token in the token file stops the start here, with the fix in the message
    _private_data_dir(settings)
    migrate.upgrade(settings.resolved_database_url)
    _private_data_dir(settings)
    # Workers that find this marker share the runs dir; others upload to the artifact store (docs/storage.md).
    sharing.mark_api_runs_dir(settings.resolved_runs_dir, artifact_store.open_store(settings).where)

    app = FastAPI(
        title="rankzero",
        summary="Submit and watch PyTorch training jobs (torchrun DDP / gradient accumulation).",
        version="0.1.0",
        docs_url=None,  # api/docs.py serves /docs from local assets (FastAPI's default uses a CDN)
        redoc_url=None,
        swagger_ui_oauth2_redirect_url=None,
        openapi_url="/openapi.json",
    )
    app.state.settings = settings
    app.state.auth_failures = FailureWindow(settings.auth_failures_per_minute)  # shared with the sign-in form
    errors.install(app)
    app.add_middleware(RequestLimitsMiddleware, settings=settings)
    app.add_middleware(ClientLimitsMiddleware, settings=settings, failures=app.state.auth_failures)
    app.add_middleware(HostCheckMiddleware, allowed_hosts=trusted_hosts(settings))
    if settings.trusted_proxy_hosts:  # outermost: the client and scheme every check above sees
        app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=sorted(settings.trusted_proxy_hosts))
    app.include_router(docs.router)

    protected = APIRouter(dependencies=[Depends(require_auth)])
    for module in (jobs, priority, hosts, operations, metrics, checkpoints, logs, stream, schema, code):
        protected.include_router(module.router)
    protected.include_router(console_patterns.router)  # a console pattern added to a job (issue 36)
    for module in (users, audit, housekeeping, workers):  # issue 23: team; issue 34: worker hosts' credentials
        protected.include_router(module.router)
    for module in (artifacts, outputs):  # the artifact store (workers upload) and a job's outputs (issue 22)
        protected.include_router(module.router)
    protected.include_router(sweeps.router)  # hyperparameter sweeps (issue 24)
    protected.include_router(environments.router)  # a job's own packages (issue 28)
    protected.include_router(webhooks.router)  # a user's own webhooks (issue 37)
    app.include_router(health.router, prefix=API_PREFIX)
    app.include_router(protected, prefix=API_PREFIX)
    prometheus.install(app, settings)  # GET /metrics (token) and request timing; a scrape listener if set

    # The dashboard is the web engineer's: included when present, so the API runs without it.
    if importlib.util.find_spec("api.routes.ui") is not None:
        app.include_router(importlib.import_module("api.routes.session").router)
        app.include_router(importlib.import_module("api.routes.ui").router)
    if WEB_STATIC.is_dir():
        app.mount("/static", StaticFiles(directory=WEB_STATIC), name="static")
    return app
