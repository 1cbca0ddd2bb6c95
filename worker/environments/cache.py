"""This host's cache of built environments: `<environment_dir>/<key>/`, one per lock × Python × torch.

- One build per entry at a time: a file lock per key (`.<key>.lock`); a job that finds the lock held waits
  (alive: its heartbeat ticks) and then finds the entry built. An entry appears complete, by an atomic
  rename of its `.partial-*` folder, read-only (files 0444/0555, folders 0555); the sandbox mounts it
  read-only too (worker/sandbox.py).
- Last used: the entry's mtime, touched at every start. `<key>.json` beside it says its size.
- Size cap: the whole folder counts, uv's download cache (`.uv-cache`, used by no other uv) included, by the
  disk its files take (`disk_use`: hard links once; uv links an entry's files to its cache's). Past
  RANKZERO_ENVIRONMENT_CACHE_MAX_BYTES `evict` empties uv's cache first (an entry keeps its files through its own
  links, and an evicted entry's bytes are free only once the cache's links to them are gone), then removes what
  `to_evict` (pure) picks: the least recently used entries no live job uses, each under its build lock.
- uv's cache is emptied only while no uv command runs on this host: each holds `.uv-cache.lock` shared
  (`uv_cache_in_use`), the emptying takes it exclusively or waits for the next eviction.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import shutil
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from worker import file_lock

PARTIAL_PREFIX = ".partial-"
KEY = re.compile(r"^[0-9a-f]{64}$")
MARKER = ".rankzero-environment"  # written last inside a built entry: present means complete
UV_CACHE = ".uv-cache"  # uv's download cache (UV_CACHE_DIR of every uv command, worker/environments/uv.py)
UV_CACHE_LOCK = ".uv-cache.lock"


@dataclass(frozen=True)
class Entry:
    key: str
    size: int
    last_used: float


def entry_dir(root: Path, key: str) -> Path:
    return root / key


def python_of(root: Path, key: str) -> Path:
    return entry_dir(root, key) / "bin" / "python"


def is_built(root: Path, key: str) -> bool:
    return (entry_dir(root, key) / MARKER).is_file()


def touch(root: Path, key: str) -> None:
    with contextlib.suppress(OSError):
        os.utime(entry_dir(root, key))  # last used (the owner may, read-only or not)


def locked(root: Path, key: str, tick: Callable[[], None] = lambda: None) -> contextlib.AbstractContextManager[None]:
    """One build of entry `key` at a time on this host (worker/file_lock.py)."""
    return file_lock.held(root / f".{key}.lock", tick)


def partial(root: Path, key: str) -> Path:
    return root / f"{PARTIAL_PREFIX}{key}-{secrets.token_hex(4)}"


def make_read_only(folder: Path) -> None:
    for dirpath, dirs, files in os.walk(folder):
        for name in files:
            p = os.path.join(dirpath, name)
            mode = os.lstat(p).st_mode
            if not stat.S_ISLNK(mode):
                os.chmod(p, 0o555 if mode & 0o111 else 0o444)
        for name in dirs:
            p = os.path.join(dirpath, name)
            if not os.path.islink(p):
                os.chmod(p, 0o555)
    os.chmod(folder, 0o555)


def remove_tree(folder: Path) -> None:
    """Remove a (read-only) tree: its folders made writable first."""
    if not folder.exists():
        return
    for dirpath, dirs, _ in os.walk(folder):
        for name in dirs:
            with contextlib.suppress(OSError):
                p = os.path.join(dirpath, name)
                if not os.path.islink(p):
                    os.chmod(p, 0o700)
    with contextlib.suppress(OSError):
        os.chmod(folder, 0o700)
    shutil.rmtree(folder, ignore_errors=True)


def publish(root: Path, key: str, tmp: Path, meta: dict[str, object]) -> int:
    """Make the built `tmp` the entry `key`: its size recorded, read-only, then renamed into place."""
    size = disk_use(tmp)
    (tmp / MARKER).write_text(json.dumps({**meta, "size": size}))
    make_read_only(tmp)
    (root / f"{key}.json").write_text(json.dumps({**meta, "size": size}))
    os.rename(tmp, entry_dir(root, key))
    return size


def entries(root: Path) -> list[Entry]:
    found = []
    for path in root.iterdir() if root.is_dir() else ():
        if KEY.match(path.name) and path.is_dir():
            try:
                size = int(json.loads((root / f"{path.name}.json").read_text()).get("size", 0))
            except (OSError, ValueError):
                size = disk_use(path)
            found.append(Entry(path.name, size, path.stat().st_mtime))
    return found


def disk_use(folder: Path) -> int:
    """The disk the files under `folder` take (allocated blocks), each hard-linked file once."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for dirpath, dirs, files in os.walk(folder):
        for name in (*files, *dirs):
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(dirpath, name))
                if st.st_nlink > 1 and not stat.S_ISDIR(st.st_mode):
                    if (st.st_dev, st.st_ino) in seen:
                        continue
                    seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


@contextlib.contextmanager
def uv_cache_in_use(root: Path, tick: Callable[[], None] = lambda: None) -> Iterator[None]:
    """Held (shared) around every uv command: uv's cache is not emptied under it."""
    root.mkdir(parents=True, exist_ok=True)
    with file_lock.held(root / UV_CACHE_LOCK, tick, shared=True):  # being emptied (briefly): wait, alive
        yield


def empty_uv_cache(root: Path) -> bool:
    """Remove uv's download cache unless a uv command is running on this host (then False: the next eviction
    will). The entries keep their files (their own hard links)."""
    if not (root / UV_CACHE).exists():
        return True
    with open(root / UV_CACHE_LOCK, "a+b") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        try:
            remove_tree(root / UV_CACHE)
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
    return True


def to_evict(found: list[Entry], in_use: set[str], cap: int, total: int | None = None) -> list[str]:
    """The entries to remove so the cache fits `cap`: least recently used first, never one in use (the cache
    may stay over the cap when what is left is all in use). `total`: the cache's disk use (default: the
    entries' sizes)."""
    total = sum(e.size for e in found) if total is None else total
    chosen = []
    for e in sorted(found, key=lambda e: e.last_used):
        if total <= cap:
            break
        if e.key in in_use:
            continue
        chosen.append(e.key)
        total -= e.size
    return chosen


def evict(root: Path, in_use: set[str], cap: int) -> list[str]:
    """Fit the cache, uv's download cache included, under `cap`: uv's cache emptied first, then what `to_evict`
    picks removed (each under its build lock, so never one being built), measured again until it fits or
    nothing more may go (entries share files, so one may free less than its size); the keys removed."""
    removed: list[str] = []
    if disk_use(root) > cap:
        empty_uv_cache(root)
        while chosen := to_evict(entries(root), in_use, cap, disk_use(root)):
            for key in chosen:
                with locked(root, key):  # renamed away first: a removal cut short never leaves half an entry
                    gone = partial(root, key)
                    os.rename(entry_dir(root, key), gone)
                    (root / f"{key}.json").unlink(missing_ok=True)
                remove_tree(gone)
            removed += chosen
    for stale in root.glob(f"{PARTIAL_PREFIX}*"):  # a build whose worker died mid-way
        if time.time() - stale.lstat().st_mtime > 24 * 3600:
            remove_tree(stale)
    return removed
