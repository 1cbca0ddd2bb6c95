"""`python -m worker.health`: exit 0 when this host's Celery worker answers a ping (the container
healthcheck of the worker service), 1 otherwise."""

from __future__ import annotations

import socket
import sys


def main() -> int:
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


if __name__ == "__main__":
    sys.exit(main())
