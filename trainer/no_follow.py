"""Opening a file below a root with no link followed: the opener of a run dir's files (stdlib only).

A job's processes may write anything in their run dir, links and FIFOs included, and the service (worker
and API, outside the sandbox) reads and writes files there. Through a link it would read what the job
cannot (`logs/attempt_1/0/stderr.log -> <data dir>/api_token`), write where the job points, or read for
ever (`spec.json -> /dev/zero`, a FIFO). So a path is opened one component at a time from the root (`openat`
with O_NOFOLLOW; folders with O_DIRECTORY): a link anywhere below the root fails with ELOOP (or ENOTDIR), an
OSError every caller handles as a missing file. Only regular files are opened, with O_NONBLOCK (a FIFO must
not block the open) and the type checked on the opened descriptor (no check-then-open race).

The trainer uses it for spec.json (`RunDir`); core/run_files.py builds the service's writes on it (the
import contracts keep the trainer free of core). docs/security.md "The job sandbox".
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path
from typing import IO, Any

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
MODES = {
    "rb": os.O_RDONLY,
    "r": os.O_RDONLY,
    "ab": os.O_WRONLY | os.O_APPEND | os.O_CREAT,
    "a": os.O_WRONLY | os.O_APPEND | os.O_CREAT,
    "wb": os.O_WRONLY | os.O_TRUNC | os.O_CREAT,
    "w": os.O_WRONLY | os.O_TRUNC | os.O_CREAT,
}


class LinkRefused(OSError):
    """A path below the root is a link, or not a regular file (it is not followed)."""


def parts_below(root: Path, path: Path) -> tuple[str, ...] | None:
    """`path`'s components below `root`, or None when it is not below it. A `..` in `path` is refused (a
    name the job wrote, `checkpoints/../../data/api_token`), never resolved."""
    if ".." in Path(path).parts:
        raise LinkRefused(errno.EACCES, f"{path} climbs out with '..'; not followed")
    try:
        parts = Path(os.path.normpath(path)).relative_to(os.path.normpath(root)).parts
    except ValueError:
        return None
    return parts or None


def open_dir_below(root: Path, parts: tuple[str, ...], create: bool) -> int:
    """A descriptor of the folder `root/parts...`, each component opened without following a link (the root
    itself is the service's, opened as it is)."""
    if create:
        root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
            try:
                inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                raise LinkRefused(exc.errno, f"{part} (in {root}) is a link or not a folder; not followed") from None
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_fd(path: Path, flags: int, root: Path, mode: int = 0o644) -> int:
    """os.open of `path` with no link followed below `root` (created folders on the way for O_CREAT), a
    regular file only. A path outside `root` is opened with O_NOFOLLOW on its last component only."""
    flags |= os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # NONBLOCK: a FIFO must not block the open
    parts = parts_below(root, path)
    if parts is None:
        fd = os.open(path, flags, mode)
    else:
        parent = open_dir_below(root, parts[:-1], bool(flags & os.O_CREAT))
        try:
            fd = os.open(parts[-1], flags, mode, dir_fd=parent)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENXIO):
                raise LinkRefused(exc.errno, f"{path} is a link or not a regular file; not followed") from None
            raise
        finally:
            os.close(parent)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise LinkRefused(errno.ELOOP, f"{path} is not a regular file; not read")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_file(path: Path, mode: str, root: Path, **kw: Any) -> IO[Any]:
    """`open(path, mode)` (rb, r, ab, a, wb, w) with no link followed below `root`, a regular file only."""
    return os.fdopen(open_fd(path, MODES[mode], root), mode, **kw)


def read_text(path: Path, root: Path, errors: str = "replace", max_bytes: int | None = None) -> str:
    """The file's text (its first `max_bytes`, when given), no link followed below `root`."""
    with open_file(path, "rb", root) as fh:
        data = fh.read() if max_bytes is None else fh.read(max_bytes)
    return data.decode(errors=errors)
