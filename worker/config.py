"""Worker-only knobs that are not (yet) fields of api.settings.Settings.

Read from the environment with the same RANKZERO_ prefix so one .env configures everything.
"""

from __future__ import annotations

import os


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError as exc:
        raise ValueError(f"{name}={raw!r} is not a number of seconds; set it to e.g. {default}") from exc


def visibility_timeout_s() -> float:
    """Redis redelivers an unacked message after this long. The DB claim makes redelivery harmless,
    so it only bounds how long a message stays parked; 12 h keeps the redelivery noise low."""
    return _env_float("RANKZERO_VISIBILITY_TIMEOUT_S", 12 * 3600.0)


def stale_after_s(heartbeat_s: float) -> float:
    """A running job whose heartbeat is older than this belongs to a dead worker."""
    return _env_float("RANKZERO_STALE_AFTER_S", max(30.0, 6 * heartbeat_s))


def poll_s() -> float:
    """How often the supervisor looks at the job row (cancel) and the events file."""
    return _env_float("RANKZERO_POLL_S", 0.25)


def queue_name() -> str:
    """The Celery queue jobs go through; separate pools (or test runs) sharing a broker use their own."""
    return os.environ.get("RANKZERO_QUEUE", "rankzero")


def embedded_poll_s() -> float:
    """How often a worker on the embedded (SQLAlchemy) transport looks for new messages."""
    return _env_float("RANKZERO_EMBEDDED_POLL_S", 0.1)
