"""The bundle format's names, errors, limits and manifest (no I/O beyond hashing a file).

A bundle is a gzip-compressed tar of a user's code folder, named by the sha256 of its bytes and
referred to by a job spec as `code: "sha256:<hex>"`; stored as `<runs_dir>/.bundles/<sha256>.tar.gz`
with `<sha256>.json` (its summary) and `<sha256>.files.json` (its file list).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: importing the settings costs a CLI start 0.25 s
    from core.settings import Settings


REF_PREFIX = "sha256:"
SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
STORE_DIRNAME = ".bundles"
ARCHIVE_SUFFIX = ".tar.gz"
IGNORE_FILES = (".rankzeroignore", ".gitignore")  # at one level, the first that matches a path decides
NEVER_PACKED = frozenset({".git", "__pycache__"})
READ_CAP = 4 * 1024 * 1024  # no tar header (pax, GNU long name) is read in one go past this
CHUNK = 1024 * 1024
MAX_NAME = 1024
INCOMING_PREFIX = ".incoming-"
INCOMING_STALE_S = 24 * 3600.0
EXCLUDE_HINT = (
    "leave out what the job does not import (data sets, checkpoints, virtual environments, build outputs) "
    "by listing it in a .rankzeroignore file in the code folder (gitignore syntax; .gitignore is honoured too)"
)


class BundleError(ValueError):
    """A bundle that cannot be packed, stored or used; the message says what to do."""


class BundleTooLarge(BundleError):
    """Over one of the limits; `setting` names it (e.g. max_bundle_files)."""

    def __init__(self, message: str, setting: str) -> None:
        super().__init__(message)
        self.setting = setting


class UnsafeBundle(BundleError):
    """An archive member that could write outside the bundle's folder or is not a plain file."""


class NotStored(BundleError):
    """No bundle with this sha256 on this host."""


# --- names --------------------------------------------------------------------------------------


def parse_ref(code: str) -> str:
    """The hex digest of a spec's `code` ("sha256:<hex>"; a bare hex digest is accepted too)."""
    digest = code.removeprefix(REF_PREFIX)
    if not SHA256_HEX.match(digest):
        raise BundleError(f"not a bundle reference: {code!r} (expected 'sha256:' and 64 lowercase hex digits)")
    return digest


def ref(sha256: str) -> str:
    return REF_PREFIX + sha256


def store_dir(settings: Settings) -> Path:
    return settings.resolved_runs_dir / STORE_DIRNAME


def archive_path(settings: Settings, sha256: str) -> Path:
    return store_dir(settings) / f"{parse_ref(sha256)}{ARCHIVE_SUFFIX}"


def manifest_path(settings: Settings, sha256: str) -> Path:
    """The bundle's summary (sha256, bytes, files, unpacked_bytes): small, cheap to read."""
    return store_dir(settings) / f"{parse_ref(sha256)}.json"


def files_path(settings: Settings, sha256: str) -> Path:
    """The bundle's file list ([[path, size], ...])."""
    return store_dir(settings) / f"{parse_ref(sha256)}.files.json"


def is_stored(settings: Settings, sha256: str) -> bool:
    return archive_path(settings, sha256).is_file()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


# --- limits and manifests -----------------------------------------------------------------------


@dataclass(frozen=True)
class Limits:
    max_bytes: int
    max_unpacked_bytes: int
    max_files: int

    @classmethod
    def of(cls, settings: Settings) -> Limits:
        return cls(settings.max_bundle_bytes, settings.max_bundle_unpacked_bytes, settings.max_bundle_files)

    @property
    def read_budget(self) -> int:
        """Most decompressed bytes a bundle within the limits can take (data, headers, padding)."""
        return self.max_unpacked_bytes + 2048 * (2 * self.max_files + 64) + 16 * CHUNK


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB" if n >= 100_000 else f"{n:,} bytes"


def _largest(sizes: dict[str, int], n: int = 3) -> str:
    top = sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
    return ", ".join(f"{name} {_mb(size)}" for name, size in top)


def too_large(what: str, value: int, limit: int, setting: str, sizes: dict[str, int] | None = None) -> BundleTooLarge:
    """The error for one limit: which limit, its setting, the biggest entries, how to exclude files."""
    unit = _mb if setting != "max_bundle_files" else (lambda n: f"{n:,} files")
    biggest = f" (largest: {_largest(sizes)})" if sizes else ""
    return BundleTooLarge(
        f"the code bundle's {what} is {unit(value)}, over this server's limit of {unit(limit)} "
        f"(RANKZERO_{setting.upper()}){biggest}: {EXCLUDE_HINT}",
        setting,
    )


@dataclass
class Manifest:
    """What a bundle holds: its digest and size, and every file (path, size)."""

    sha256: str
    bytes: int
    files: int
    unpacked_bytes: int
    paths: list[tuple[str, int]] = field(default_factory=list)

    def top_level_modules(self) -> set[str]:
        """Importable top-level names: packages (folders) and modules (`name.py`) at the bundle's root."""
        names = set()
        for path, _ in self.paths:
            first, _, rest = path.partition("/")
            name = first if rest else first.removesuffix(".py") if first.endswith(".py") else ""
            if name.isidentifier():
                names.add(name)
        return names

    def summary_json(self) -> str:
        return json.dumps({k: v for k, v in asdict(self).items() if k != "paths"}, separators=(",", ":"))

    def paths_json(self) -> str:
        return json.dumps(self.paths, separators=(",", ":"))

    @classmethod
    def from_json(cls, summary: str, paths: str | None = None) -> Manifest:
        data = json.loads(summary)
        data["paths"] = [(str(p), int(s)) for p, s in json.loads(paths)] if paths is not None else []
        return cls(**data)
