"""Error responses: FastAPI's 422 shape made safe to encode, and 503 while the database is away.

FastAPI echoes the offending input in each error; when that input is NaN or infinity (refused
precisely because JSON cannot carry it) the default handler would fail to encode its own answer
and turn a 422 into a 500. Non-finite numbers are echoed as strings instead.
"""

from __future__ import annotations

import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import InterfaceError, OperationalError


def _finite_json(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite_json(v) for v in value]
    return value


async def validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
    return JSONResponse({"detail": _finite_json(jsonable_encoder(exc.errors()))}, status_code=422)


async def database_unavailable(_request: Request, _exc: Exception) -> JSONResponse:
    # A database restart or failover: a 503 the client may retry, rather than an opaque 500.
    return JSONResponse(
        {"detail": "the database is unavailable right now; retry in a few seconds"},
        status_code=503,
        headers={"Retry-After": "5"},
    )


def install(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(OperationalError, database_unavailable)
    app.add_exception_handler(InterfaceError, database_unavailable)
