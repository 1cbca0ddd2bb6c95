"""Checking a bundle (the API at upload, the workers before unpacking): `check(archive, limits)`.

Streams the members once and refuses, naming the member: absolute paths, `..`, links of any kind,
devices, FIFOs, duplicate names, and what no worker could unpack (a file and a folder of one
name, a path component over NAME_MAX bytes); and, naming the limit and its setting, more than
`max_bundle_files` files or `max_bundle_unpacked_bytes` bytes. Tar headers are read through a
reader that refuses any single read over `READ_CAP` (a pax header cannot make us buffer a
gigabyte) and any total past the unpacked budget (no gzip bomb), and the gzip CRC is checked to
the end. `walk` is the one pass; core/bundles/unpack.py extracts during it.
"""

from __future__ import annotations

import gzip
import re
import tarfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO

from core.bundles.format import (
    CHUNK,
    MAX_NAME,
    READ_CAP,
    BundleError,
    BundleTooLarge,
    Limits,
    Manifest,
    UnsafeBundle,
    too_large,
)

NAME_MAX = 255  # bytes in one path component on every file system a worker may unpack to


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


def _members(tar: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    while (member := tar.next()) is not None:
        yield member


def _components_fit(name: str) -> None:
    for part in name.split("/"):
        size = len(part.encode("utf-8", "surrogateescape"))
        if size > NAME_MAX:
            raise UnsafeBundle(
                f"archive member {name[:120]!r}: the path component {part[:40]!r}… is {size} bytes, over the "
                f"{NAME_MAX} a file system allows; rename it"
            )


@dataclass
class _Tree:
    """Files and folders seen so far, so a name cannot be both (no worker could unpack that)."""

    files: set[str] = field(default_factory=set)
    folders: set[str] = field(default_factory=set)

    def add(self, name: str, is_folder: bool) -> None:
        parts = name.split("/")
        for depth in range(1, len(parts)):
            parent = "/".join(parts[:depth])
            if parent in self.files:
                raise UnsafeBundle(
                    f"archive member {name!r} lies inside {parent!r}, which the bundle also holds as a file; "
                    "a name is a file or a folder, not both"
                )
            self.folders.add(parent)
        if is_folder:
            self.folders.add(name)
        elif name in self.folders:
            raise UnsafeBundle(
                f"archive member {name!r} is a file, and the bundle also holds a folder of that name; "
                "a name is a file or a folder, not both"
            )
        else:
            self.files.add(name)


OnMember = Callable[[tarfile.TarFile, tarfile.TarInfo, str], None]


def walk(archive: Path, limits: Limits, on_member: OnMember | None = None) -> Manifest:
    """The one pass over `archive`: every member checked, then handed to `on_member(tar, member, name)`
    (unpack.py extracts there); the manifest (sha256 unset). Raises BundleError naming what to fix."""
    tally = _Tally(limits)
    tree = _Tree()
    check_into = Path("/nonexistent-rankzero-bundle-check")
    try:
        with gzip.open(archive, "rb") as gz:
            reader = _BudgetedReader(gz, limits.read_budget, tally.over_unpacked)  # type: ignore[arg-type]
            with tarfile.open(fileobj=reader, mode="r:") as tar:  # type: ignore[call-overload]
                for member in _members(tar):
                    name = _safe_name(member)
                    _check_type(member, name)
                    _components_fit(name)
                    tarfile.data_filter(member.replace(name=name, deep=False), str(check_into))
                    tally.add(name, member)
                    if name:
                        tree.add(name, member.isdir())
                    if on_member is not None:
                        on_member(tar, member, name)
            while reader.read(CHUNK):  # to the end: the gzip CRC and length are checked there
                pass
    except tarfile.FilterError as exc:
        raise UnsafeBundle(f"archive refused: {exc}") from None
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise BundleError(
            f"not a valid tar.gz archive ({exc}); make bundles with `rankzero submit --code DIR`"
        ) from None
    return Manifest("", archive.stat().st_size, tally.files, tally.unpacked, tally.paths)


def check(archive: Path, limits: Limits) -> Manifest:
    """Check every member of `archive` without unpacking it; its manifest (sha256 unset)."""
    return walk(archive, limits)
