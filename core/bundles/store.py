"""The bundle store shared by the API and the workers of one host or one compose project.

- Storage: `<runs_dir>/.bundles/<sha256>.tar.gz` (+ `<sha256>.json`, its summary, and
  `<sha256>.files.json`, its file list); written atomically (a temp file in the same folder,
  hard-linked into place: exactly one writer creates it, and a reader never sees half a file).
- Retention (`cleanup`): a bundle no queued/running job refers to, none finished within
  `bundle_retention_s`, and not itself written within that time, is removed.
- Size cap (`enforce_cap`): past `max_bundle_store_bytes`, the least recently used bundles (last
  uploaded, checked with HEAD or fetched: `mark_used`) that no queued or running job names are
  removed first.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.bundles.check import check
from core.bundles.format import (
    ARCHIVE_SUFFIX,
    INCOMING_PREFIX,
    INCOMING_STALE_S,
    REF_PREFIX,
    SHA256_HEX,
    Limits,
    Manifest,
    archive_path,
    files_path,
    manifest_path,
    store_dir,
    too_large,
)

if TYPE_CHECKING:
    from core.settings import Settings

# The database (SQLAlchemy, the tables) is imported by the two reads that need it: `core.bundles` re-exports this
# module, and `rankzero submit --code` (packing only) would otherwise load it at every start (~0.5 s of CPU).


def _ensure_store(settings: Settings) -> Path:
    folder = store_dir(settings)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder


def incoming(settings: Settings) -> Path:
    """A fresh temp file name in the store's folder (same file system: the final link is atomic)."""
    return _ensure_store(settings) / f"{INCOMING_PREFIX}{secrets.token_hex(8)}"


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f"{INCOMING_PREFIX}{secrets.token_hex(8)}")
    tmp.write_text(text)
    os.replace(tmp, path)


def store(settings: Settings, tmp: Path, sha256: str) -> tuple[Manifest, bool]:
    """Check the archive at `tmp` (sha256 computed by the caller while receiving it) and keep it.

    Returns its manifest and whether it was new; `tmp` is gone either way. An archive already stored
    is left untouched (not rewritten).
    """
    final = archive_path(settings, sha256)
    try:
        size = tmp.stat().st_size
        if size > settings.max_bundle_bytes:
            raise too_large("compressed size", size, settings.max_bundle_bytes, "max_bundle_bytes")
        if final.is_file() and (known := manifest(settings, sha256)) is not None:
            mark_used(settings, sha256)
            return known, False
        found = check(tmp, Limits.of(settings))
        found.sha256 = sha256
        _save_manifest(settings, found)
        try:
            os.link(tmp, final)
        except FileExistsError:
            return found, False
        except OSError:  # a file system without hard links
            if final.exists():
                return found, False
            os.replace(tmp, final)
        enforce_cap(settings)
        return found, True
    finally:
        tmp.unlink(missing_ok=True)


def _save_manifest(settings: Settings, found: Manifest) -> None:
    _write_atomic(files_path(settings, found.sha256), found.paths_json())
    _write_atomic(manifest_path(settings, found.sha256), found.summary_json())  # last: the summary means complete


def manifest(settings: Settings, sha256: str, paths: bool = True) -> Manifest | None:
    """The stored bundle's manifest (with its file list unless `paths` is False: then a small read),
    rebuilt from the archive when missing; None when the bundle is not stored."""
    try:
        summary = manifest_path(settings, sha256).read_text()
        return Manifest.from_json(summary, files_path(settings, sha256).read_text() if paths else None)
    except (OSError, ValueError, TypeError, KeyError):
        pass  # missing or damaged: rebuilt from the archive
    archive = archive_path(settings, sha256)
    if not archive.is_file():
        return None
    found = check(archive, Limits.of(settings))
    found.sha256 = sha256
    _save_manifest(settings, found)
    return found


# --- retention ----------------------------------------------------------------------------------


def _codes(specs: Iterable[Any]) -> set[str]:
    found = set()
    for spec in specs:
        code = spec.get("code") if isinstance(spec, dict) else None
        if isinstance(code, str) and SHA256_HEX.match(code.removeprefix(REF_PREFIX)):
            found.add(code.removeprefix(REF_PREFIX))
    return found


def referenced(settings: Settings, now: datetime | None = None) -> set[str]:
    """Digests of the bundles a job still needs: unfinished jobs, and jobs finished within retention."""
    now = now or datetime.now(timezone.utc)
    cutoff = now - timedelta(seconds=settings.bundle_retention_s)
    from sqlalchemy import or_, select
    from sqlmodel import Session, col

    from core.db import get_engine
    from core.tables import TERMINAL_STATUSES, Job

    with Session(get_engine(settings.resolved_database_url)) as s:
        rows = s.execute(
            select(col(Job.spec)).where(
                or_(
                    col(Job.status).not_in(list(TERMINAL_STATUSES)),
                    col(Job.finished_at).is_(None),
                    col(Job.finished_at) >= cutoff,
                )
            )
        ).all()
    return _codes(spec for (spec,) in rows)


def cleanup(settings: Settings, now: float | None = None) -> list[str]:
    """Remove stored bundles nothing refers to (see the module doc); returns the removed digests.

    Safe to run from several processes at once. Call it from a periodic loop (the worker's recovery
    sweep); a bundle younger than the retention period is kept even unreferenced (uploaded, not yet
    submitted).
    """
    folder = store_dir(settings)
    if not folder.is_dir():
        return []
    now = time.time() if now is None else now
    keep = referenced(settings, datetime.fromtimestamp(now, timezone.utc))
    removed = []
    for path in folder.iterdir():
        with contextlib.suppress(FileNotFoundError):
            age = now - path.stat().st_mtime
            digest = path.name.split(".", 1)[0]
            if path.name.startswith(INCOMING_PREFIX) or path.suffix == ".json":
                # a crashed upload's temp file; a manifest whose archive is gone
                orphan = path.suffix != ".json" or not (folder / f"{digest}{ARCHIVE_SUFFIX}").exists()
                if orphan and age > INCOMING_STALE_S:
                    path.unlink()
            elif SHA256_HEX.match(digest) and digest not in keep and age > settings.bundle_retention_s:
                path.unlink()
                manifest_path(settings, digest).unlink(missing_ok=True)
                files_path(settings, digest).unlink(missing_ok=True)
                removed.append(digest)
    return removed + enforce_cap(settings)


# --- the size cap -------------------------------------------------------------------------------


def mark_used(settings: Settings, sha256: str) -> None:
    """Record a use of a stored bundle (its summary's mtime): the size cap removes the least recent first."""
    with contextlib.suppress(OSError, ValueError):
        os.utime(manifest_path(settings, sha256))


def lru_victims(stored: Iterable[tuple[str, int, float]], cap: int, protected: set[str]) -> list[str]:
    """Which bundles to remove, least recently used first, until the rest fit in `cap` bytes.

    `stored`: (sha256, bytes, last used) per bundle; `protected` ones are never removed (when they
    alone are over the cap, what is left over stays).
    """
    entries = sorted(stored, key=lambda e: (e[2], e[0]))
    total = sum(size for _, size, _ in entries)
    victims = []
    for digest, size, _ in entries:
        if total <= cap:
            break
        if digest in protected:
            continue
        victims.append(digest)
        total -= size
    return victims


def live(settings: Settings) -> set[str]:
    """Digests of the bundles queued or running jobs name."""
    from sqlalchemy import select
    from sqlmodel import Session, col

    from core.db import get_engine
    from core.tables import TERMINAL_STATUSES, Job

    with Session(get_engine(settings.resolved_database_url)) as s:
        rows = s.execute(select(col(Job.spec)).where(col(Job.status).not_in(list(TERMINAL_STATUSES)))).all()
    return _codes(spec for (spec,) in rows)


def _stored(settings: Settings) -> list[tuple[str, int, float]]:
    found = []
    for path in store_dir(settings).glob(f"*{ARCHIVE_SUFFIX}"):
        digest = path.name.removesuffix(ARCHIVE_SUFFIX)
        if not SHA256_HEX.match(digest):
            continue
        with contextlib.suppress(FileNotFoundError):
            size = path.stat().st_size
            try:
                used = manifest_path(settings, digest).stat().st_mtime
            except FileNotFoundError:
                used = path.stat().st_mtime
            found.append((digest, size, used))
    return found


def remove(settings: Settings, sha256: str) -> None:
    archive_path(settings, sha256).unlink(missing_ok=True)
    manifest_path(settings, sha256).unlink(missing_ok=True)
    files_path(settings, sha256).unlink(missing_ok=True)
    (store_dir(settings) / f"{sha256.removeprefix(REF_PREFIX)}.left-out.json").unlink(missing_ok=True)  # its record


def enforce_cap(settings: Settings) -> list[str]:
    """Keep the store within `max_bundle_store_bytes` (see the module doc); returns the removed digests."""
    if not store_dir(settings).is_dir():
        return []
    stored = _stored(settings)
    if sum(size for _, size, _ in stored) <= settings.max_bundle_store_bytes:
        return []
    victims = lru_victims(stored, settings.max_bundle_store_bytes, live(settings))
    for digest in victims:
        remove(settings, digest)
    return victims
