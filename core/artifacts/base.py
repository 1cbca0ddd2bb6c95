"""The artifact store's one small interface, and what its methods return.

A store holds whole files under keys (core/artifacts/keys.py), each written once a worker's upload has
been verified against its sha256, and replaced atomically. Two back-ends implement it: `DiskStore`
(the API host's runs dir; the default) and `S3Store` (any S3-compatible object store).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

CHUNK = 1 << 20


class ArtifactMissing(FileNotFoundError):
    """No such key in the store."""


class StoreUnavailable(RuntimeError):
    """The store could not be reached or refused the operation; the message says which and what to do."""


@dataclass(frozen=True)
class Entry:
    key: str
    size: int
    sha256: str | None  # None: the back-end did not record one (computed by the reader when it needs it)


class ArtifactStore(Protocol):
    kind: str  # "disk" | "s3": how the Hosts page and /api/artifacts/storage name it
    where: str  # a human-readable location (a folder, s3://bucket/prefix)

    def put(self, key: str, source: Path, sha256: str) -> None:
        """Store `source` (a complete local file whose bytes have sha256 `sha256`) under `key`, atomically."""
        ...

    def read(self, key: str, start: int = 0) -> Iterator[bytes]:
        """The bytes of `key` from `start`, in chunks (ArtifactMissing when absent)."""
        ...

    def stat(self, key: str) -> Entry | None: ...

    def list(self, prefix: str, limit: int) -> list[Entry]:
        """Entries whose key starts with `prefix`, by key, at most `limit` of them."""
        ...

    def delete(self, key: str) -> None: ...
