"""A size cap on this host's unpacked-bundle cache (`<data_dir>/bundles`, worker/bundles.py; issue 19 item 6):
a 1 MB upload may unpack to 1 GB on every worker, so after each new unpack the least recently used
bundles are removed until the cache fits RANKZERO_BUNDLE_CACHE_MAX_BYTES — never one a live (queued,
starting, running) job names, so no attempt ever loses its code. "Used" is the folder's mtime, which
worker/bundles.py `ensure` touches at every launch. A bundle removed here is unpacked again if needed.

`to_remove` is the pure choice (table-tested); `enforce` measures, chooses and removes.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import select
from sqlmodel import Session, col

from core import bundles
from core.db import get_engine
from core.job_state import TERMINAL_STATUSES
from core.settings import Settings
from core.tables import Job
from worker.quota import dir_bytes

log = logging.getLogger("rankzero.worker")
_sizes: dict[str, int] = {}  # an unpacked bundle never changes: measured once per process


def to_remove(entries: list[tuple[str, float, int]], keep: set[str], cap: int) -> list[str]:
    """Which bundles to remove, least recently used first, so the rest fit `cap` bytes. `entries`: (sha256,
    last used, bytes). A kept bundle stays even when the cache cannot then fit (its job needs it)."""
    total = sum(size for _, _, size in entries)
    chosen: list[str] = []
    for sha, _, size in sorted(entries, key=lambda e: e[1]):
        if total <= cap:
            break
        if sha not in keep:
            chosen.append(sha)
            total -= size
    return chosen


def live_codes(settings: Settings) -> set[str]:
    """The digests of the bundles that jobs not yet finished name."""
    with Session(get_engine(settings.resolved_database_url)) as s:
        specs = s.execute(select(col(Job.spec)).where(col(Job.status).not_in(list(TERMINAL_STATUSES)))).all()
    found: set[str] = set()
    for (spec,) in specs:
        code = spec.get("code") if isinstance(spec, dict) else None
        with contextlib.suppress(bundles.BundleError, TypeError):
            found.add(bundles.parse_ref(code)) if isinstance(code, str) else None
    return found


def _entries(root: Path) -> list[tuple[str, float, int]]:
    out = []
    for path in root.iterdir():
        if not bundles.SHA256_HEX.match(path.name):
            continue
        with contextlib.suppress(OSError):
            used = path.lstat().st_mtime
            if path.name not in _sizes:
                _sizes[path.name] = dir_bytes(path)
            out.append((path.name, used, _sizes[path.name]))
    return out


def enforce(settings: Settings, root: Path, keep: set[str], remove: Callable[[str], None]) -> list[str]:
    """Remove least recently used bundles of `root` until it fits the cap; `keep` and live jobs' bundles stay.
    `remove(sha256)` removes one (worker/bundles.py's, under that bundle's lock). Never raises: a cache over
    its cap is housekeeping, never a job's failure."""
    try:
        if not root.is_dir():
            return []
        entries = _entries(root)
        if sum(size for _, _, size in entries) <= settings.bundle_cache_max_bytes:
            return []
        chosen = to_remove(entries, keep | live_codes(settings), settings.bundle_cache_max_bytes)
        for sha in chosen:
            remove(sha)
            _sizes.pop(sha, None)
        if chosen:
            log.info("bundle cache over RANKZERO_BUNDLE_CACHE_MAX_BYTES: removed %d least recently used", len(chosen))
        return chosen
    except Exception:
        log.exception("bundle cache: enforcing its size cap failed")
        return []
