"""Liveness and database reachability; the one route without auth."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import text

from api.deps import SettingsDep
from api.models import Health
from core.db import get_engine

router = APIRouter(tags=["health"])


@router.get("/health", response_model=Health, responses={503: {"model": Health}})
def health(settings: SettingsDep) -> Health | JSONResponse:
    try:
        with get_engine(settings.resolved_database_url).connect() as conn:
            conn.execute(text("SELECT 1"))
    except Exception:
        return JSONResponse({"status": "degraded", "database": "unreachable"}, status_code=503)
    return Health(status="ok", database="ok")
