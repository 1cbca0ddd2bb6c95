"""GET /metrics: the service in Prometheus' text format (docs/operations.md).

On the API port it needs the token like every route (Prometheus sends it with `authorization:
{credentials: <token>}`). With RANKZERO_METRICS_ADDRESS (host:port) the API process also serves the
same registry on a listener of its own without the token, for a scrape network the API port is not on.
Everything is read from the database at scrape time (api/observability/), so any API process gives
the same numbers; the request latency histogram is this process's own.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest, start_http_server

from api.auth import require_auth
from api.observability import snapshot
from api.observability.collector import DatabaseCollector
from api.observability.request_timing import RequestTiming
from api.routes.hosts import list_hosts
from core.db import get_read_engine
from core.settings import Settings

log = logging.getLogger("rankzero.api")
router = APIRouter(tags=["operations"])


@router.get("/metrics", response_class=Response, responses={200: {"content": {"text/plain": {}}}})
def metrics(request: Request) -> Response:
    """Every rankzero metric, in Prometheus' text exposition format."""
    registry: CollectorRegistry = request.app.state.metrics_registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


def registry_for(settings: Settings) -> CollectorRegistry:
    """A registry of its own per app (tests build many), holding the database collector."""
    registry = CollectorRegistry(auto_describe=False)
    engine = get_read_engine(settings.resolved_database_url)
    registry.register(DatabaseCollector(lambda: snapshot.read(engine, list_hosts(settings))))
    return registry


def split_address(address: str) -> tuple[str, int]:
    """'host:port' or '[v6]:port' → (host, port)."""
    host, _, port = address.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


def install(app: FastAPI, settings: Settings) -> None:
    """Time every request, serve /metrics behind the token, and start the token-free scrape listener when
    RANKZERO_METRICS_ADDRESS is set (stopped with the app)."""
    registry = registry_for(settings)
    app.state.metrics_registry = registry
    app.add_middleware(RequestTiming, registry=registry)
    app.include_router(router, dependencies=[Depends(require_auth)])
    if not settings.metrics_address:
        return
    host, port = split_address(settings.metrics_address)
    listener: dict[str, Any] = {}

    def start() -> None:
        server, _thread = start_http_server(port, addr=host, registry=registry)
        listener["server"] = server
        log.warning("metrics: token-free scrape listener on %s:%d (RANKZERO_METRICS_ADDRESS)", host, port)

    def stop() -> None:
        server = listener.pop("server", None)
        if server is not None:
            server.shutdown()
            server.server_close()

    app.router.on_startup.append(start)
    app.router.on_shutdown.append(stop)
