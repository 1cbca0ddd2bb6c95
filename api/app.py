"""The FastAPI application factory: `create_app(settings)`.

Migrates the database on creation (so every way of starting the API, tests included, runs on the
newest schema), mounts the REST routes under /api behind auth, and the dashboard (api/routes/ui.py
and web/static) when those are present.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

from fastapi import APIRouter, Depends, FastAPI
from fastapi.staticfiles import StaticFiles

from api import errors
from api.auth import require_auth
from api.limits import RequestLimitsMiddleware
from api.routes import checkpoints, health, jobs, logs, metrics, schema, stream
from core import migrate
from core.settings import Settings, get_settings

WEB_STATIC = Path(__file__).resolve().parent.parent / "web" / "static"
API_PREFIX = "/api"


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    migrate.upgrade(settings.resolved_database_url)

    app = FastAPI(
        title="rankzero",
        summary="Submit and watch PyTorch training jobs (torchrun DDP / gradient accumulation).",
        version="0.1.0",
        docs_url="/docs",
        openapi_url="/openapi.json",
    )
    app.state.settings = settings
    errors.install(app)
    app.add_middleware(RequestLimitsMiddleware, max_body_bytes=settings.max_body_bytes)

    protected = APIRouter(dependencies=[Depends(require_auth)])
    for module in (jobs, metrics, checkpoints, logs, stream, schema):
        protected.include_router(module.router)
    app.include_router(health.router, prefix=API_PREFIX)
    app.include_router(protected, prefix=API_PREFIX)

    # The dashboard is the web engineer's: included when present, so the API runs without it.
    if importlib.util.find_spec("api.routes.ui") is not None:
        app.include_router(importlib.import_module("api.routes.ui").router)
    if WEB_STATIC.is_dir():
        app.mount("/static", StaticFiles(directory=WEB_STATIC), name="static")
    return app
