"""The default back-end: the API host's own runs dir (nothing to set up).

Its layout is the runs dir's (`<runs>/job_<id>/...`), so a file shipped by a worker lands exactly where
a shared runs dir would have put it, and every read path of the API finds it. Symlinks are never
followed or listed (a script job's work dir links the bundle's files: those are not outputs), and files are
opened through core/run_files.py (no link below the root followed, regular files only, never blocking on a
FIFO): a job writes its run dir and could swap one in after a listing or a stat.
Logs and events grow while a job runs: `append` takes them by offset, idempotently (object stores
have no append, so these always land here, whatever back-end holds checkpoints and outputs).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

from core import run_files
from core.artifacts.base import CHUNK, ArtifactMissing, Entry
from core.artifacts.keys import relative_path

INCOMING = ".incoming"  # uploads being received and verified (same file system: the final move is a rename)
_SHA_CACHE_MAX = 4096


class OffsetGap(ValueError):
    """An append starts past the end of what the store holds; `size` is where it must start."""

    def __init__(self, size: int) -> None:
        super().__init__(f"the store holds {size} bytes of this file; send from offset {size}")
        self.size = size


def file_sha256(path: Path, root: Path | None = None) -> str:
    """The file's sha256, no link followed below `root` (default: its folder)."""
    digest = hashlib.sha256()
    with run_files.open_file(path, "rb", root or path.parent) as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class DiskStore:
    kind = "disk"

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.where = str(self.root)
        self._shas: dict[tuple[str, int, int], str] = {}
        self._lock = threading.Lock()

    def path_of(self, key: str) -> Path:
        """The file of `key`; refuses a key whose folders are symlinks leaving the root."""
        path = self.root / relative_path(key)
        parent = path.parent.resolve()
        if parent != self.root and self.root not in parent.parents:
            raise ArtifactMissing(f"{key} lies outside the store")
        return parent / path.name

    def incoming(self) -> Path:
        folder = self.root / INCOMING
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        return folder

    def put(self, key: str, source: Path, sha256: str) -> None:
        path = self.path_of(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        if source.parent.resolve() != self.incoming().resolve():  # another file system: copy, then rename
            tmp = self.incoming() / f"{path.name}.{os.getpid()}.{threading.get_ident()}"
            shutil.copyfile(source, tmp)
            source = tmp
        os.replace(source, path)
        st = path.stat()
        self._remember(str(path), st.st_size, st.st_mtime_ns, sha256)

    def read(self, key: str, start: int = 0) -> Iterator[bytes]:
        path = self.path_of(key)
        try:
            fh = run_files.open_file(path, "rb", self.root)  # closed by the generator
        except (FileNotFoundError, run_files.LinkRefused):
            raise ArtifactMissing(f"no artifact {key}") from None

        def chunks() -> Iterator[bytes]:
            with fh:
                fh.seek(start)
                while chunk := fh.read(CHUNK):
                    yield chunk

        return chunks()

    def stat(self, key: str) -> Entry | None:
        try:
            path = self.path_of(key)
            st = path.lstat()
        except (ArtifactMissing, FileNotFoundError, NotADirectoryError):
            return None
        if not path.is_file() or path.is_symlink():
            return None
        return Entry(key, st.st_size, self.sha256_of(path))

    def sha256_of(self, path: Path) -> str:
        """The file's sha256, hashed once per (size, mtime) while this process lives."""
        st = path.stat()
        ident = (str(path), st.st_size, st.st_mtime_ns)
        with self._lock:
            known = self._shas.get(ident)
        if known is None:
            known = file_sha256(path, self.root)
            self._remember(*ident, known)
        return known

    def _remember(self, path: str, size: int, mtime_ns: int, sha256: str) -> None:
        with self._lock:
            if len(self._shas) >= _SHA_CACHE_MAX:
                self._shas.pop(next(iter(self._shas)))
            self._shas[(path, size, mtime_ns)] = sha256

    def list(self, prefix: str, limit: int) -> list[Entry]:
        folder, _, _ = prefix.rpartition("/")
        base = self.root / relative_path(folder) if folder else self.root
        found: list[Entry] = []
        if not base.is_dir() or base.is_symlink():
            return found
        for dirpath, dirnames, filenames in os.walk(base):  # never follows symlinked folders
            dirnames.sort()
            for name in sorted(filenames):
                path = Path(dirpath) / name
                key = path.relative_to(self.root).as_posix()
                if not key.startswith(prefix) or path.is_symlink() or not path.is_file():
                    continue
                found.append(Entry(key, path.stat().st_size, None))
                if len(found) >= limit:
                    return found
        return found

    def delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path_of(key).unlink()

    def append(self, key: str, offset: int, data: bytes) -> int:
        """Write `data` at `offset` of `key` unless the store has it already; the size it holds after.
        Idempotent: bytes before the current end are not written again (a retried or repeated chunk)."""
        path = self.path_of(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        with run_files.open_file(path, "ab", self.root) as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            size = fh.seek(0, os.SEEK_END)
            if offset > size:
                raise OffsetGap(size)
            new = data[size - offset :]
            if new:
                fh.write(new)
                fh.flush()
            return max(size, offset + len(data))
