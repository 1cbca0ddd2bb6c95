"""Code bundles: a user's code folder as a tar.gz named by its sha256 (`code: "sha256:<hex>"`).

One module per job, all re-exported here (`from core import bundles; bundles.X`):
- `format`: names and paths, errors, limits, the manifest;
- `pack`: a folder → a deterministic bundle (the CLI's side);
- `check`: every member checked in one streamed pass, nothing written (the API at upload);
- `unpack`: the same pass, extracting (the workers; worker/bundles.py);
- `store`: the shared store `<runs>/.bundles`, retention and its size cap.
"""

from core.bundles.check import NAME_MAX, check, walk
from core.bundles.format import (
    ARCHIVE_SUFFIX,
    CHUNK,
    EXCLUDE_HINT,
    IGNORE_FILES,
    INCOMING_PREFIX,
    INCOMING_STALE_S,
    MAX_NAME,
    NEVER_PACKED,
    READ_CAP,
    REF_PREFIX,
    SHA256_HEX,
    STORE_DIRNAME,
    BundleError,
    BundleTooLarge,
    Limits,
    Manifest,
    NotStored,
    UnsafeBundle,
    archive_path,
    file_sha256,
    files_path,
    is_stored,
    manifest_path,
    parse_ref,
    ref,
    store_dir,
    too_large,
)
from core.bundles.pack import Packed, SourceFile, collect, pack
from core.bundles.store import (
    cleanup,
    enforce_cap,
    incoming,
    live,
    lru_victims,
    manifest,
    mark_used,
    referenced,
    remove,
    store,
)
from core.bundles.unpack import make_read_only, remove_tree, scan, unpack

__all__ = [
    "ARCHIVE_SUFFIX", "CHUNK", "EXCLUDE_HINT", "IGNORE_FILES", "INCOMING_PREFIX", "INCOMING_STALE_S", "MAX_NAME",
    "NAME_MAX", "NEVER_PACKED", "READ_CAP", "REF_PREFIX", "SHA256_HEX", "STORE_DIRNAME", "BundleError",
    "BundleTooLarge", "Limits", "Manifest", "NotStored", "Packed", "SourceFile", "UnsafeBundle", "archive_path",
    "check", "cleanup", "collect", "enforce_cap", "file_sha256", "files_path", "incoming", "is_stored", "live",
    "lru_victims", "make_read_only", "manifest", "manifest_path", "mark_used", "pack", "parse_ref", "ref",
    "referenced", "remove", "remove_tree", "scan", "store", "store_dir", "too_large", "unpack", "walk",
]  # fmt: skip
