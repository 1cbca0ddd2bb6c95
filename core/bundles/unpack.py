"""Unpacking a bundle on a worker: `unpack(archive, limits, dest)` checks every member (check.py's
one pass) and extracts it through tarfile's `filter="data"` as well; `make_read_only` and
`remove_tree` for the unpacked copy."""

from __future__ import annotations

import contextlib
import os
import shutil
import tarfile
from collections.abc import Callable
from pathlib import Path

from core.bundles.check import walk
from core.bundles.format import Limits, Manifest, UnsafeBundle


def _extract(tar: tarfile.TarFile, member: tarfile.TarInfo, name: str, dest: Path) -> None:
    member.name = name
    try:
        tar.extract(member, dest, set_attrs=True, filter="data")
    except tarfile.FilterError as exc:
        raise UnsafeBundle(f"archive member {name!r} refused: {exc}") from None


def unpack(archive: Path, limits: Limits, dest: Path, on_member: Callable[[], None] | None = None) -> Manifest:
    """Check and unpack `archive` into `dest`, member by member; its manifest (sha256 unset).

    `on_member` is called once per member (a caller's keep-alive during a long unpack).
    """
    dest = dest.resolve()

    def extract(tar: tarfile.TarFile, member: tarfile.TarInfo, name: str) -> None:
        _extract(tar, member, name, dest)
        if on_member is not None:
            on_member()

    return walk(archive, limits, extract)


def scan(
    archive: Path, limits: Limits, dest: Path | None = None, on_member: Callable[[], None] | None = None
) -> Manifest:
    """`unpack` into `dest` when given, else `check` (the name worker/bundles.py calls)."""
    if dest is None:
        return walk(archive, limits, None if on_member is None else lambda *_: on_member())
    return unpack(archive, limits, dest, on_member)


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
