"""Files of a run dir, opened by the worker without following a link the job made.

A job's processes may write anything in their run dir, links included, and the worker (outside the
sandbox, as its own user: root in a container) reads and writes files there: the spec, its launcher log,
the environment log, the console's series, rank logs and error files. Through a link it would write where
the job points (`spec.json.tmp -> <data dir>/api_token`: the token replaced by a text the job knows) or read
what the job cannot (`logs/attempt_1/0/stderr.log -> /proc/self/environ`: the worker's environment in the
job's error message), or read for ever (`-> /dev/zero`). So every such path is opened one component at a
time from the run dir's root (`openat` with O_NOFOLLOW; folders with O_DIRECTORY): a link anywhere below the
root fails with ELOOP (or ENOTDIR), an OSError, which every caller already handles as a missing file. Only
regular files are opened (a FIFO would block the worker). docs/security.md "The job sandbox".
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
import stat
from pathlib import Path
from typing import IO, Any

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MODES = {
    "rb": os.O_RDONLY,
    "r": os.O_RDONLY,
    "ab": os.O_WRONLY | os.O_APPEND | os.O_CREAT,
    "a": os.O_WRONLY | os.O_APPEND | os.O_CREAT,
    "wb": os.O_WRONLY | os.O_TRUNC | os.O_CREAT,
    "w": os.O_WRONLY | os.O_TRUNC | os.O_CREAT,
}


class LinkRefused(OSError):
    """A path below the run dir's root is a link, or not a regular file (the worker does not follow it)."""


def _parts(root: Path, path: Path) -> tuple[str, ...] | None:
    """`path`'s components below `root`, or None when it is not below it. A `..` in `path` is refused (a
    name the job wrote, `checkpoints/../../data/api_token`), never resolved."""
    if ".." in Path(path).parts:
        raise LinkRefused(errno.EACCES, f"{path} climbs out with '..'; not followed")
    try:
        parts = Path(os.path.normpath(path)).relative_to(os.path.normpath(root)).parts
    except ValueError:
        return None
    return parts or None


def _open_dir(root: Path, parts: tuple[str, ...], create: bool) -> int:
    """A descriptor of the folder `root/parts...`, each component opened without following a link."""
    if create:
        root.mkdir(parents=True, exist_ok=True)  # the root is the worker's (the job's view starts below it)
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
    """os.open of `path` with no link followed below `root` (created folders on the way for O_CREAT).
    A path outside `root` is opened with O_NOFOLLOW on its last component only."""
    flags |= os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # NONBLOCK: a FIFO must not block the open
    parts = _parts(root, path)
    if parts is None:
        fd = os.open(path, flags, mode)
    else:
        parent = _open_dir(root, parts[:-1], bool(flags & os.O_CREAT))
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
    """`open(path, mode)` (rb, r, ab, a, wb, w) with no link followed below `root`."""
    return os.fdopen(open_fd(path, _MODES[mode], root), mode, **kw)


def read_text(path: Path, root: Path, errors: str = "replace", max_bytes: int | None = None) -> str:
    """The file's text (its first `max_bytes`, when given), no link followed below `root`."""
    with open_file(path, "rb", root) as fh:
        data = fh.read() if max_bytes is None else fh.read(max_bytes)
    return data.decode(errors=errors)


def sha256(path: Path, root: Path) -> str:
    """The file's sha256, no link followed below `root` (a FIFO or /dev/zero would hold the worker for ever)."""
    digest = hashlib.sha256()
    with open_file(path, "rb", root) as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def write_atomic(path: Path, text: str, root: Path) -> None:
    """Replace `path` by a file holding `text`: a fresh temporary (O_EXCL, no link followed) renamed over it
    within the same folder descriptor, so neither the temporary nor a folder on the way can be a job's link."""
    parts = _parts(root, path)
    if parts is None:
        raise ValueError(f"{path} is not inside {root}")
    parent = _open_dir(root, parts[:-1], create=True)
    try:
        tmp = f".{parts[-1]}.{secrets.token_hex(6)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=parent)
        try:
            with os.fdopen(fd, "w") as out:
                out.write(text)
            os.replace(tmp, parts[-1], src_dir_fd=parent, dst_dir_fd=parent)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=parent)
            raise
    finally:
        os.close(parent)


def open_dir(path: Path, root: Path) -> int:
    """A descriptor of the folder `path` below `root`, made where missing, no link followed (the caller closes
    it; names inside are then handled with dir_fd=)."""
    parts = _parts(root, path)
    if parts is None:
        raise ValueError(f"{path} is not inside {root}")
    return _open_dir(root, parts, create=True)


def make_dirs(path: Path, root: Path) -> None:
    """mkdir -p of `path` below `root`, no link followed (raises LinkRefused where the job put one)."""
    parts = _parts(root, path)
    if parts is None:
        path.mkdir(parents=True, exist_ok=True)
        return
    os.close(_open_dir(root, parts, create=True))
