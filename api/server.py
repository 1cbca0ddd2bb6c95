"""Run the API under uvicorn: `serve(settings)`, called by `rankzero api` / `rankzero up`.

Refuses to bind a non-loopback address unless an API token is configured: a generated token
kept in a local file is fine for 127.0.0.1, but a service reachable from the network must have
a token its operator chose and knows (at least 32 characters: Settings refuses shorter ones).

uvicorn runs with bounds against slow or many clients (`UVICORN_LIMITS`, enforced whatever parser
runs by the protocol of api/connections.py): at most `limit_concurrency` requests in flight (503
past it), idle keep-alive connections closed after 5 s, request heads at most 16 KiB and sent
within RANKZERO_HEAD_TIMEOUT_S, per-client and global connection caps that close the oldest idle
connection first. Bodies get their deadline in api/limits.py.
"""

from __future__ import annotations

import ipaddress
import sys
from pathlib import Path

import uvicorn

from api.connections import ConnectionLimits, guarded_protocol
from core.settings import LOOPBACK_HOSTS, Settings

UVICORN_LIMITS: dict[str, object] = {
    "limit_concurrency": 512,
    "timeout_keep_alive": 5,
    "h11_max_incomplete_event_size": 16 * 1024,
    "backlog": 256,
}


def http_protocol(settings: Settings) -> type:
    """uvicorn's httptools protocol with the bounds of UVICORN_LIMITS and the settings binding it."""
    limits = ConnectionLimits.from_settings(
        settings,
        max_head_bytes=int(UVICORN_LIMITS["h11_max_incomplete_event_size"]),  # type: ignore[call-overload]
        max_in_flight=int(UVICORN_LIMITS["limit_concurrency"]),  # type: ignore[call-overload]
    )
    return guarded_protocol(limits)


class UnsafeBind(RuntimeError):
    pass


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve to anything


def check_bind(settings: Settings) -> None:
    """Raise UnsafeBind when binding settings.host would expose the API without a configured token."""
    if not is_loopback(settings.host) and settings.api_token is None:
        raise UnsafeBind(
            f"refusing to listen on {settings.host} without a configured API token: "
            "set RANKZERO_API_TOKEN (or bind 127.0.0.1)"
        )


def log_to_file(path: Path) -> dict[str, object]:
    """uvicorn's logging for `rankzero up`: every request and server message to `path`, only warnings
    to the terminal, so the banner with the URL and token stays on screen."""
    fmt = {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": fmt},
        "handlers": {
            "file": {"class": "logging.FileHandler", "filename": str(path), "formatter": "plain"},
            "terminal": {"class": "logging.StreamHandler", "formatter": "plain", "level": "WARNING"},
        },
        "loggers": {
            "uvicorn": {"handlers": ["file", "terminal"], "level": "INFO", "propagate": False},
            "uvicorn.error": {"level": "INFO"},
            "uvicorn.access": {"handlers": ["file"], "level": "INFO", "propagate": False},
        },
    }


def serve(settings: Settings, **uvicorn_options: object) -> None:
    """Check the bind address, build the app and run uvicorn until interrupted."""
    check_bind(settings)
    from api.app import create_app

    if not is_loopback(settings.host) and not settings.allowed_hosts.strip():
        print(
            f"note: listening on {settings.host}, but only requests with Host localhost/127.0.0.1/[::1]"
            f"{'' if settings.host in ('0.0.0.0', '::') else ' or ' + settings.host} are answered (others: 400); "
            "set RANKZERO_ALLOWED_HOSTS to the names clients use (e.g. rankzero.example.com)",
            file=sys.stderr,
        )

    app = create_app(settings)
    options: dict[str, object] = {
        "host": settings.host,
        "port": settings.port,
        "log_level": "info",
        "proxy_headers": False,
        "server_header": False,
        "http": http_protocol(settings),
        "ws": "none",  # no WebSocket routes: an Upgrade request is plain HTTP (the guard keeps its books)
        **UVICORN_LIMITS,
    }
    options.update(uvicorn_options)
    uvicorn.run(app, **options)  # type: ignore[arg-type]
