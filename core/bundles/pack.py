"""Packing a code folder into a bundle (the CLI's side; `rankzero submit --code DIR`).

Honours `.gitignore` and `.rankzeroignore` files (gitignore syntax, at any depth; the deeper file
decides, and at one level `.rankzeroignore` before `.gitignore`), never takes `.git` or
`__pycache__`, stores regular files only (a link to a file inside the folder is stored as that
file; any other link, device, FIFO or socket is an error naming it) and is deterministic: sorted
members, mtime 0, uid/gid 0, modes 0644/0755, a gzip header without name or time. The same tree
gives the same sha256.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import stat
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

import pathspec

from core.bundles.format import IGNORE_FILES, NEVER_PACKED, BundleError, _largest
from core.bundles.include import Includes


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


def collect(folder: Path, include: Includes | None = None) -> list[SourceFile]:
    """The files `pack` takes from `folder`, sorted by path (ignore files honoured, .git never; `include`:
    globs taken whatever the ignore files say, core/bundles/include.py)."""
    inc = include or Includes(())
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
            if _ignored(rel, True, specs) and not (name not in NEVER_PACKED and inc and inc.may_hold(rel)):
                continue
            if (here / name).is_symlink():
                found.append(_source_file(root, here / name, rel))  # a file link passes; others say why
            else:
                kept_dirs.append(name)
        dirnames[:] = kept_dirs
        for name in sorted(filenames):
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if not _ignored(rel, False, specs) or (name not in NEVER_PACKED and inc.file(rel)):
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
