"""Code bundles: the one home of the bundle format (pack, check, unpack, store, clean up).

A bundle is a gzip-compressed tar of a user's code folder, named by the sha256 of its bytes and
referred to by a job spec as `code: "sha256:<hex>"`.

- Packing (`pack`, the CLI's side) honours `.gitignore` and `.rankzeroignore` files (gitignore syntax,
  at any depth; the deeper file decides, and at one level `.rankzeroignore` before `.gitignore`), never
  takes `.git` or `__pycache__`, stores regular files only (a link to a file inside the folder is
  stored as that file; any other link, device, FIFO or socket is an error naming it) and is
  deterministic: sorted members, mtime 0, uid/gid 0, modes 0644/0755, a gzip header without name
  or time. The same tree gives the same sha256.
- Checking (`scan`, the API at upload and the workers before unpacking) streams the members once
  and refuses, naming the member: absolute paths, `..`, links of any kind, devices, FIFOs, duplicate
  names; and, naming the limit and its setting, more than `max_bundle_files` files or
  `max_bundle_unpacked_bytes` bytes. Tar headers are read through a reader that refuses any single
  read over `READ_CAP` (a pax header cannot make us buffer a gigabyte) and any total past the
  unpacked budget (no gzip bomb), and the gzip CRC is checked to the end. Unpacking goes member by
  member through tarfile's `filter="data"` as well.
- Storage: `<runs_dir>/.bundles/<sha256>.tar.gz` (+ `<sha256>.json`, its summary, and
  `<sha256>.files.json`, its file list), shared by the API
  and the workers of one host or one compose project; written atomically (a temp file in the same
  folder, hard-linked into place: exactly one writer creates it, and a reader never sees half a file).
- Retention (`cleanup`): a bundle no queued/running job refers to, none finished within
  `bundle_retention_s`, and not itself written within that time, is removed.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
import tarfile
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path, PurePosixPath
from typing import IO, Any

import pathspec
from sqlalchemy import or_, select
from sqlmodel import Session

from core.db import get_engine
from core.settings import Settings
from core.tables import TERMINAL_STATUSES, Job

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


# --- packing (client side) ----------------------------------------------------------------------


@dataclass(frozen=True)
class SourceFile:
    path: str  # posix, relative to the folder
    source: Path  # what is read (a link inside the folder: its target)
    size: int
    executable: bool


@dataclass(frozen=True)
class Packed:
    archive: Path
    sha256: str
    bytes: int
    files: int
    unpacked_bytes: int
    largest: str  # the biggest top-level entries, for messages


_Specs = list[tuple[str, pathspec.GitIgnoreSpec]]  # (folder relative to the root, its rules), shallow first


def _read_specs(folder: Path, rel: str) -> _Specs:
    specs = []
    for name in reversed(IGNORE_FILES):  # `_ignored` reads the list from its end
        path = folder / name
        if path.is_file() and not path.is_symlink():
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
            specs.append((rel, pathspec.GitIgnoreSpec.from_lines(lines)))
    return specs


def _ignored(rel: str, is_dir: bool, specs: _Specs) -> bool:
    """gitignore semantics across nested files: the deepest file with a matching rule decides."""
    if PurePosixPath(rel).name in NEVER_PACKED:
        return True
    for base, spec in reversed(specs):
        sub = rel[len(base) + 1 :] if base else rel
        result = spec.check_file(sub + "/" if is_dir else sub)
        if result.include is not None:
            return bool(result.include)
    return False


def _not_packable(rel: str, what: str) -> BundleError:
    return BundleError(
        f"{rel} is {what}; a bundle holds regular files only: list it in the code folder's .rankzeroignore "
        "(gitignore syntax) to leave it out"
    )


def _link_target(root: Path, full: Path, rel: str) -> Path:
    try:
        target = full.resolve(strict=True)
    except (OSError, RuntimeError):
        raise _not_packable(rel, "a broken symbolic link") from None
    if not target.is_relative_to(root):
        raise _not_packable(rel, f"a symbolic link leaving the folder (to {target})")
    if not target.is_file():
        raise _not_packable(rel, "a symbolic link to a folder")
    return target


def _source_file(root: Path, full: Path, rel: str) -> SourceFile:
    info = full.lstat()
    source = full
    if stat.S_ISLNK(info.st_mode):
        source = _link_target(root, full, rel)
        info = source.stat()
    if not stat.S_ISREG(info.st_mode):
        raise _not_packable(rel, "a device, FIFO or socket")
    return SourceFile(rel, source, info.st_size, bool(info.st_mode & 0o111))


def collect(folder: Path) -> list[SourceFile]:
    """The files `pack` takes from `folder`, sorted by path (ignore files honoured, .git never)."""
    root = folder.resolve()
    if not root.is_dir():
        raise BundleError(f"{folder} is not a folder")
    found: list[SourceFile] = []
    specs_of: dict[str, _Specs] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        rel_dir = here.relative_to(root).as_posix()
        rel_dir = "" if rel_dir == "." else rel_dir
        parent = specs_of.get(rel_dir.rpartition("/")[0], []) if rel_dir else []
        specs = parent + _read_specs(here, rel_dir)
        specs_of[rel_dir] = specs
        kept_dirs = []
        for name in sorted(dirnames):
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if _ignored(rel, True, specs):
                continue
            if (here / name).is_symlink():
                found.append(_source_file(root, here / name, rel))  # a file link passes; others say why
            else:
                kept_dirs.append(name)
        dirnames[:] = kept_dirs
        for name in sorted(filenames):
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if not _ignored(rel, False, specs):
                found.append(_source_file(root, here / name, rel))
    return sorted(found, key=lambda f: f.path)


class _HashingWriter:
    """A write-only file object that hashes and counts what passes through it."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw, self.digest, self.size = raw, hashlib.sha256(), 0

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        self.size += len(data)
        return self.raw.write(data)

    def flush(self) -> None:
        self.raw.flush()


def _tar_info(f: SourceFile) -> tarfile.TarInfo:
    info = tarfile.TarInfo(f.path)
    info.size = f.size
    info.mode = 0o755 if f.executable else 0o644
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def pack(folder: Path, out: Path, files: list[SourceFile] | None = None, compresslevel: int = 6) -> Packed:
    """Write `folder` as a deterministic tar.gz at `out`; the same tree always gives the same sha256."""
    files = collect(folder) if files is None else files
    sizes: dict[str, int] = {}
    for f in files:
        top = f.path.split("/", 1)[0] + ("/" if "/" in f.path else "")
        sizes[top] = sizes.get(top, 0) + f.size
    with open(out, "wb") as raw:
        writer = _HashingWriter(raw)
        with (
            gzip.GzipFile(filename="", mode="wb", fileobj=writer, mtime=0, compresslevel=compresslevel) as gz,  # type: ignore[arg-type]
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
        ):
            for f in files:
                with open(f.source, "rb") as fh:
                    tar.addfile(_tar_info(f), fh)
    return Packed(out, writer.digest.hexdigest(), writer.size, len(files), sum(f.size for f in files), _largest(sizes))


# --- checking and unpacking (API and workers) ---------------------------------------------------


class _BudgetedReader:
    """Decompressed bytes for tarfile: no single read past READ_CAP, no total past the budget."""

    def __init__(self, raw: IO[bytes], budget: int, on_over: Callable[[], BundleError]) -> None:
        self.raw, self.budget, self.on_over, self.read_total = raw, budget, on_over, 0

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0 or n > READ_CAP:
            raise UnsafeBundle(f"an archive header asks for {n} bytes in one piece; this is not a bundle rankzero made")
        data = self.raw.read(n)
        self.read_total += len(data)
        if self.read_total > self.budget:
            raise self.on_over()
        return data

    def seek(self, pos: int, whence: int = 0) -> int:
        if whence == 0 and pos > self.budget:
            raise self.on_over()
        return self.raw.seek(pos, whence)

    def tell(self) -> int:
        return self.raw.tell()


def _safe_name(member: tarfile.TarInfo) -> str:
    name = member.name
    if not name or "\x00" in name or len(name) > MAX_NAME:
        raise UnsafeBundle(f"archive member {name[:80]!r}: empty, too long or containing NUL")
    if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
        raise UnsafeBundle(f"archive member {name!r} has an absolute path; bundles hold relative paths only")
    parts = PurePosixPath(name.replace("\\", "/")).parts
    if ".." in parts:
        raise UnsafeBundle(f"archive member {name!r} contains '..' (it would land outside the bundle's folder)")
    return "/".join(p for p in parts if p != ".")


def _check_type(member: tarfile.TarInfo, name: str) -> None:
    if member.issym() or member.islnk():
        target = member.linkname
        leaves = target.startswith("/") or ".." in PurePosixPath(target).parts
        what = "leaving the tree" if leaves else "(links are not accepted in bundles)"
        raise UnsafeBundle(
            f"archive member {name!r} is a {'symbolic' if member.issym() else 'hard'} link to {target!r} {what}; "
            "`rankzero submit --code` stores linked files as plain files"
        )
    if member.ischr() or member.isblk() or member.isfifo():
        raise UnsafeBundle(f"archive member {name!r} is a device or FIFO; bundles hold regular files only")
    if not (member.isreg() or member.isdir()):
        raise UnsafeBundle(f"archive member {name!r} is not a regular file or folder (tar type {member.type!r})")


@dataclass
class _Tally:
    limits: Limits
    files: int = 0
    members: int = 0
    unpacked: int = 0
    seen: set[str] = field(default_factory=set)
    sizes: dict[str, int] = field(default_factory=dict)
    paths: list[tuple[str, int]] = field(default_factory=list)

    def add(self, name: str, member: tarfile.TarInfo) -> None:
        if name in self.seen:
            raise UnsafeBundle(f"archive member {name!r} appears twice; a bundle lists each file once")
        self.seen.add(name)
        self.members += 1
        if not member.isreg():
            if self.members > 2 * self.limits.max_files + 64:
                raise self.over_files(self.members)
            return
        self.files += 1
        self.unpacked += member.size
        top = name.split("/", 1)[0] + ("/" if "/" in name else "")
        self.sizes[top] = self.sizes.get(top, 0) + member.size
        self.paths.append((name, member.size))
        if self.files > self.limits.max_files:
            raise self.over_files(self.files)
        if self.unpacked > self.limits.max_unpacked_bytes:
            raise self.over_unpacked()

    def over_files(self, n: int) -> BundleTooLarge:
        return too_large("file count", n, self.limits.max_files, "max_bundle_files", self.sizes)

    def over_unpacked(self) -> BundleTooLarge:
        return too_large(
            "unpacked size", self.unpacked, self.limits.max_unpacked_bytes, "max_bundle_unpacked_bytes", self.sizes
        )


def _extract(tar: tarfile.TarFile, member: tarfile.TarInfo, name: str, dest: Path) -> None:
    member.name = name
    try:
        tar.extract(member, dest, set_attrs=True, filter="data")
    except tarfile.FilterError as exc:
        raise UnsafeBundle(f"archive member {name!r} refused: {exc}") from None


def _members(tar: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    while (member := tar.next()) is not None:
        yield member


def scan(
    archive: Path, limits: Limits, dest: Path | None = None, on_member: Callable[[], None] | None = None
) -> Manifest:
    """Check every member of `archive` (and unpack it into `dest` when given); its manifest (sha256 unset).

    `on_member` is called once per member (a caller's keep-alive during a long unpack).
    """
    tally = _Tally(limits)
    check_into = (dest or Path("/nonexistent-rankzero-bundle-check")).resolve()
    try:
        with gzip.open(archive, "rb") as gz:
            reader = _BudgetedReader(gz, limits.read_budget, tally.over_unpacked)  # type: ignore[arg-type]
            with tarfile.open(fileobj=reader, mode="r:") as tar:  # type: ignore[call-overload]
                for member in _members(tar):
                    name = _safe_name(member)
                    _check_type(member, name)
                    tarfile.data_filter(member.replace(name=name, deep=False), str(check_into))
                    tally.add(name, member)
                    if dest is not None:
                        _extract(tar, member, name, dest)
                    if on_member is not None:
                        on_member()
            while reader.read(CHUNK):  # to the end: the gzip CRC and length are checked there
                pass
    except tarfile.FilterError as exc:
        raise UnsafeBundle(f"archive refused: {exc}") from None
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise BundleError(
            f"not a valid tar.gz archive ({exc}); make bundles with `rankzero submit --code DIR`"
        ) from None
    return Manifest("", archive.stat().st_size, tally.files, tally.unpacked, tally.paths)


def make_read_only(root: Path) -> None:
    """Files 0444 (0555 when executable), folders 0555: the ranks cannot change the shared copy."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames:
            path = Path(dirpath) / name
            path.chmod(0o555 if path.stat().st_mode & 0o100 else 0o444)
        for name in dirnames:
            (Path(dirpath) / name).chmod(0o555)
    root.chmod(0o555)


def remove_tree(root: Path) -> None:
    """Remove a (read-only) unpacked bundle."""
    if not root.exists():
        return
    for dirpath, _, _ in os.walk(root):
        with contextlib.suppress(OSError):
            Path(dirpath).chmod(0o700)
    shutil.rmtree(root, ignore_errors=True)


# --- the store ----------------------------------------------------------------------------------


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
            return known, False
        found = scan(tmp, Limits.of(settings))
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
    found = scan(archive, Limits.of(settings))
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
    with Session(get_engine(settings.resolved_database_url)) as s:
        rows = s.execute(
            select(Job.spec).where(
                or_(
                    Job.status.not_in(list(TERMINAL_STATUSES)),  # type: ignore[attr-defined]
                    Job.finished_at.is_(None),  # type: ignore[union-attr]
                    Job.finished_at >= cutoff,  # type: ignore[operator]
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
    return removed
