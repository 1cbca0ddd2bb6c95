"""`python -m worker.health`: exit 0 when this host's worker is alive (the container healthcheck of
the worker service), 1 otherwise. On a broker with broadcast (Redis) the Celery worker must answer a
ping; the embedded SQLAlchemy broker has none (a ping always times out), so there this host's row in
the hosts table must have a fresh heartbeat (the worker beats it every heartbeat_s)."""

from __future__ import annotations

import socket
import sys


def main() -> int:
    from core.settings import get_settings

    settings = get_settings()
    if settings.resolved_broker_url.startswith("sqla+"):
        return _host_heartbeat_is_fresh(settings)
    return _celery_answers_a_ping()


def _celery_answers_a_ping() -> int:
    from worker.celery_app import app

    node = f"celery@{socket.gethostname()}"
    try:
        replies = app.control.ping(destination=[node], timeout=4.0)
    except Exception as exc:
        print(f"unhealthy: {exc}", file=sys.stderr)
        return 1
    if not any(node in r for r in replies):
        print(f"unhealthy: {node} did not answer a ping", file=sys.stderr)
        return 1
    return 0


def _host_heartbeat_is_fresh(settings) -> int:
    from core import hosts
    from core.db import get_engine

    name = settings.resolved_host_name
    try:
        rows = hosts.read_all(get_engine(settings.resolved_database_url), settings.resolved_stale_after_s)
    except Exception as exc:
        print(f"unhealthy: {exc}", file=sys.stderr)
        return 1
    if not any(h.name == name and h.alive for h in rows):
        print(f"unhealthy: host {name} has no fresh heartbeat", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
