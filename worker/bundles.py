"""A job's code bundle on this host: found or fetched, unpacked once, read-only, first on the ranks' path.

`code_dir(spec, settings, keep_alive)` is what the supervisor calls before launching an attempt: None
for a job without `code`, else the folder to put first on the ranks' PYTHONPATH (`pythonpath_first`).
It raises `BundleUnavailable` with a message fit for the job's error. A fetch or unpack can take a
while (a 1 GB bundle): `keep_alive` (the job's heartbeat, e.g. `lambda: jobs.touch_live(engine, id)`)
is called every KEEP_ALIVE_S meanwhile, including while waiting for another job's unpack of the same
bundle, so the recovery sweep never takes the job for lost.

- Where the archive comes from: the shared store (`<runs_dir>/.bundles/<sha256>.tar.gz`, the API's
  own folder in embedded mode and docker-compose), else the API (`GET /api/code/<sha256>`, only when
  RANKZERO_API_URL and a token are set on this worker), its sha256 checked as it arrives.
- Where it is unpacked: `<data_dir>/bundles/<sha256>/`, once per host: a file lock per bundle makes
  concurrent jobs wait for the first unpack instead of repeating it; the folder appears by an
  atomic rename, complete, files 0444/0555 and folders 0555. Every member is checked again
  (core/bundles.py `scan`) while unpacking.
- Retention: `sweep(settings)` (the recovery loop's, throttled) removes stored bundles nothing refers
  to (core.bundles.cleanup) and unpacked copies not used within the retention period.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx

from core import bundles
from core.settings import Settings
from worker import bundle_cache, file_lock

log = logging.getLogger("rankzero.worker")
CACHE_DIRNAME = "bundles"
PARTIAL_PREFIX = ".partial-"
SWEEP_EVERY_S = 600.0
FETCH_TIMEOUT_S = 60.0
KEEP_ALIVE_S = 2.0

KeepAlive = Callable[[], object]
_last_sweep = 0.0
_sweep_lock = threading.Lock()


class BundleUnavailable(RuntimeError):
    """The job's bundle cannot be made available on this host; the message says why and what to do."""


def cache_dir(settings: Settings) -> Path:
    return settings.data_dir / CACHE_DIRNAME


def pythonpath_first(env: Mapping[str, str], folder: Path | None) -> dict[str, str]:
    """`env` with `folder` first on PYTHONPATH (unchanged when None)."""
    out = dict(env)
    if folder is not None:
        out["PYTHONPATH"] = os.pathsep.join(p for p in (str(folder), out.get("PYTHONPATH", "")) if p)
    return out


def code_dir(spec: Any, settings: Settings, keep_alive: KeepAlive | None = None) -> Path | None:
    """The unpacked bundle of a job (a JobSpec or its dict), or None when the job has no `code`."""
    code = spec.get("code") if isinstance(spec, Mapping) else getattr(spec, "code", None)
    return ensure(settings, code, keep_alive) if code else None


class _Ticker:
    """Calls `keep_alive` at most every KEEP_ALIVE_S, however often it is ticked."""

    def __init__(self, keep_alive: KeepAlive | None) -> None:
        self.keep_alive, self.last = keep_alive, time.monotonic()

    def __call__(self) -> None:
        if self.keep_alive is not None and time.monotonic() - self.last >= KEEP_ALIVE_S:
            self.last = time.monotonic()
            self.keep_alive()


def _locked(path: Path, tick: Callable[[], None] = lambda: None) -> contextlib.AbstractContextManager[None]:
    """One unpack of a bundle at a time on this host (worker/file_lock.py)."""
    return file_lock.held(path, tick)


def ensure(settings: Settings, code: str, keep_alive: KeepAlive | None = None) -> Path:
    """The folder holding bundle `code` unpacked on this host (unpacking it once, under a lock)."""
    try:
        sha256 = bundles.parse_ref(code)
    except bundles.BundleError as exc:
        raise BundleUnavailable(str(exc)) from None
    root = cache_dir(settings)
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    final = root / sha256
    tick = _Ticker(keep_alive)
    if not final.is_dir():
        with _locked(root / f".{sha256}.lock", tick):
            if not final.is_dir():
                _unpack(settings, sha256, final, tick)
        # The cache grew: keep it under its size cap (worker/bundle_cache.py; never this one, never a live job's).
        bundle_cache.enforce(settings, root, {sha256}, lambda sha: _remove_unpacked(root, sha))
    with contextlib.suppress(OSError):
        os.utime(final)  # last used: the cache keeps it for the retention period from now
    return final


def _unpack(settings: Settings, sha256: str, final: Path, tick: Callable[[], None]) -> None:
    archive, fetched = _archive(settings, sha256, tick)
    tmp = final.with_name(f"{PARTIAL_PREFIX}{sha256}-{secrets.token_hex(4)}")
    try:
        if bundles.file_sha256(archive) != sha256:
            raise BundleUnavailable(f"code bundle sha256:{sha256}: the archive at {archive} does not match its digest")
        tmp.mkdir(mode=0o700)
        bundles.scan(archive, bundles.Limits.of(settings), dest=tmp, on_member=tick)
        bundles.make_read_only(tmp)
        os.rename(tmp, final)
        log.info("code bundle %s unpacked into %s", sha256, final)
    except bundles.BundleError as exc:
        raise BundleUnavailable(f"code bundle sha256:{sha256} cannot be unpacked: {exc}") from None
    finally:
        bundles.remove_tree(tmp)
        if fetched:
            archive.unlink(missing_ok=True)


def _token(settings: Settings) -> str | None:
    if settings.worker_token is not None:  # the host's own credential (issue 34), scoped to a worker's routes
        return settings.worker_token.get_secret_value()
    if settings.api_token is not None:
        return settings.api_token.get_secret_value()
    path = settings.data_dir / "api_token"
    return path.read_text().strip() if path.is_file() else None


def _archive(settings: Settings, sha256: str, tick: Callable[[], None]) -> tuple[Path, bool]:
    """The archive's path and whether it was fetched (a temp file to remove after use)."""
    shared = bundles.archive_path(settings, sha256)
    if shared.is_file():
        return shared, False
    token = _token(settings)
    if not settings.api_url or not token:
        raise BundleUnavailable(
            f"code bundle sha256:{sha256} is not in this worker's shared store ({shared.parent}) and the worker "
            "cannot fetch it: set RANKZERO_API_URL and RANKZERO_API_TOKEN on the worker, or give it the API's "
            "runs dir (RANKZERO_RUNS_DIR on a shared volume)"
        )
    target = cache_dir(settings) / f"{PARTIAL_PREFIX}{sha256}-{secrets.token_hex(4)}.tar.gz"
    try:
        _fetch(settings.api_url, token, sha256, target, settings.max_bundle_bytes, tick)
    except BaseException:
        target.unlink(missing_ok=True)
        raise
    return target, True


def _fetch(api_url: str, token: str, sha256: str, target: Path, limit: int, tick: Callable[[], None]) -> None:
    url = f"{api_url.rstrip('/')}/api/code/{sha256}"
    digest, size = hashlib.sha256(), 0
    try:
        with (
            httpx.stream("GET", url, headers={"Authorization": f"Bearer {token}"}, timeout=FETCH_TIMEOUT_S) as r,
            open(target, "wb") as out,
        ):
            if r.status_code != 200:
                r.read()
                raise BundleUnavailable(
                    f"code bundle sha256:{sha256}: GET {url} answered {r.status_code} ({r.text[:300]})"
                )
            for chunk in r.iter_bytes(bundles.CHUNK):
                size += len(chunk)
                if size > limit:
                    raise BundleUnavailable(f"code bundle sha256:{sha256}: the API sent more than {limit:,} bytes")
                digest.update(chunk)
                out.write(chunk)
                tick()
    except httpx.HTTPError as exc:
        raise BundleUnavailable(f"code bundle sha256:{sha256}: cannot fetch it from {url}: {exc}") from None
    if digest.hexdigest() != sha256:
        raise BundleUnavailable(f"code bundle sha256:{sha256}: what {url} sent has sha256 {digest.hexdigest()}")


# --- retention ----------------------------------------------------------------------------------


def prune_cache(settings: Settings, keep: set[str], now: float | None = None) -> list[str]:
    """Remove unpacked bundles not in `keep` and unused for the retention period; the removed digests."""
    root = cache_dir(settings)
    if not root.is_dir():
        return []
    now = time.time() if now is None else now
    removed = []
    for path in root.iterdir():
        with contextlib.suppress(FileNotFoundError):
            stale = now - path.lstat().st_mtime > settings.bundle_retention_s
            if path.name.startswith(PARTIAL_PREFIX) and now - path.lstat().st_mtime > bundles.INCOMING_STALE_S:
                bundles.remove_tree(path) if path.is_dir() else path.unlink()
            elif bundles.SHA256_HEX.match(path.name) and path.name not in keep and stale:
                _remove_unpacked(root, path.name)
                removed.append(path.name)
    return removed


def _remove_unpacked(root: Path, sha256: str) -> None:
    """Remove one unpacked bundle under its lock (an unpack of it in progress finishes first)."""
    with _locked(root / f".{sha256}.lock"):
        bundles.remove_tree(root / sha256)
    (root / f".{sha256}.lock").unlink(missing_ok=True)


def sweep(settings: Settings, force: bool = False) -> None:
    """Bundle retention on this host, at most every SWEEP_EVERY_S (call it from the recovery loop)."""
    global _last_sweep
    with _sweep_lock:
        if not force and time.monotonic() - _last_sweep < SWEEP_EVERY_S:
            return
        _last_sweep = time.monotonic()
    try:
        removed = bundles.cleanup(settings)
        pruned = prune_cache(settings, bundles.referenced(settings))
        if removed or pruned:
            log.info("code bundles removed: %d stored, %d unpacked copies", len(removed), len(pruned))
    except Exception:  # retention is housekeeping: never stop the loop that calls it
        log.exception("code bundle retention sweep failed; next try in %.0f s", SWEEP_EVERY_S)
