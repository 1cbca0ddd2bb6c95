"""The API's artifact store: where checkpoints, logs, events and outputs of hosts that do not share
the API's runs dir arrive (worker/artifact_shipping.py ships them; api/routes/artifacts.py receives).

- `open_store(settings)`: the configured back-end (RANKZERO_ARTIFACT_STORE: empty → the API's runs dir,
  `s3://bucket/prefix` → S3Store); `log_store(settings)`: the disk store logs and events append to.
- `keys.py`: what may be named; `base.py`: the interface; `disk.py`, `s3.py`: the back-ends;
  `sharing.py`: whether a host sees the API's runs dir; `prune.py`: keep_last in the store.
docs/storage.md describes it all.
"""

from __future__ import annotations

import threading

from core.artifacts.base import ArtifactMissing, ArtifactStore, Entry, StoreUnavailable
from core.artifacts.disk import DiskStore
from core.settings import Settings

__all__ = [
    "ArtifactMissing",
    "ArtifactStore",
    "DiskStore",
    "Entry",
    "StoreUnavailable",
    "find",
    "log_store",
    "open_store",
    "store_for",
    "worker_token",
]

_stores: dict[tuple[str, str], ArtifactStore] = {}
_lock = threading.Lock()


def worker_token(settings: Settings) -> str | None:
    """The token a worker sends to the API: its host's own credential (RANKZERO_WORKER_TOKEN), else the server
    token (configured, else the data dir's file: an embedded set-up); None: it has none."""
    if settings.worker_token is not None:
        return settings.worker_token.get_secret_value()
    if settings.api_token is not None:
        return settings.api_token.get_secret_value()
    path = settings.data_dir / "api_token"
    return path.read_text().strip() if path.is_file() else None


def log_store(settings: Settings) -> DiskStore:
    """The API's runs dir as a store: logs and events append here (object stores cannot append)."""
    return DiskStore(settings.resolved_runs_dir)


def open_store(settings: Settings) -> ArtifactStore:
    """The back-end checkpoints and outputs go to (one per configuration, reused: it caches digests)."""
    ident = (settings.artifact_store, str(settings.resolved_runs_dir))
    with _lock:
        store = _stores.get(ident)
        if store is None:
            store = _stores[ident] = _make(settings)
        return store


# What goes to the configured back-end; everything else a job ships (logs, events…) stays on the API's disk.
BACKEND_AREAS = ("checkpoints/", "work/")


def store_for(settings: Settings, relative: str) -> ArtifactStore:
    """The store a job's file `relative` (a path inside its run dir) is kept in."""
    return open_store(settings) if relative.startswith(BACKEND_AREAS) else log_store(settings)


def find(settings: Settings, key: str) -> tuple[ArtifactStore, Entry] | None:
    """Where the file `key` is, with its entry: the API's runs dir first (a sharing host wrote it there,
    or the disk back-end holds it), then the configured back-end; None when neither has it."""
    local = log_store(settings)
    entry = local.stat(key)
    if entry is not None:
        return local, entry
    backend = open_store(settings)
    if backend.kind != local.kind:
        entry = backend.stat(key)
        if entry is not None:
            return backend, entry
    return None


def _make(settings: Settings) -> ArtifactStore:
    if not settings.artifact_store:
        return log_store(settings)
    import boto3  # only a server configured for S3 imports it
    from botocore.config import Config

    from core.artifacts.s3 import S3Store

    secret = settings.s3_secret_access_key.get_secret_value() if settings.s3_secret_access_key else None
    client = boto3.client(
        "s3",
        endpoint_url=settings.s3_endpoint_url,
        region_name=settings.s3_region,
        aws_access_key_id=settings.s3_access_key_id,
        aws_secret_access_key=secret,
        config=Config(retries={"max_attempts": 5, "mode": "standard"}, connect_timeout=10, read_timeout=60),
    )
    return S3Store(settings.artifact_store, client)
