"""Files of a run dir, opened by the service (worker and API) without following a link the job made.

A job's processes may write anything in their run dir, links and FIFOs included, and the worker (outside
the sandbox, as its own user: root in a container) and the API read and write files there: the spec, its
launcher log, the environment log, the console's series, rank logs, error files, checkpoints. Through a
link the service would write where the job points (`spec.json.tmp -> <data dir>/api_token`: the token
replaced by a text the job knows) or read what the job cannot (`logs/attempt_1/0/stderr.log ->
/proc/self/environ`: the worker's environment in the job's error message), or read for ever (`-> /dev/zero`,
a FIFO). The opener (trainer/no_follow.py, shared with the trainer, which may not import core) goes one
component at a time from the root with O_NOFOLLOW, opens regular files only (non-blocking, the type checked
on the descriptor), and raises LinkRefused (an OSError) otherwise. This module adds the writes and the
bounded reads on top. docs/security.md "The job sandbox".
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
from pathlib import Path

from trainer.no_follow import LinkRefused, open_fd, open_file, read_text
from trainer.no_follow import open_dir_below as _open_dir
from trainer.no_follow import parts_below as _parts

__all__ = ["LinkRefused", "make_dirs", "open_dir", "open_fd", "open_file", "read_text", "sha256", "write_atomic"]


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
