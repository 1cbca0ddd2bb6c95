"""Downloads of built-in data sets, once per host: a file lock in the data set's folder makes the
second job (and every other rank) wait for the first one's download, then find the files. Torch-free.

    <root>/.rankzero-download.lock      fcntl.flock'ed while torchvision checks, downloads and extracts

And the words for when the files are missing: which folder, which files, and how to fill it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trainer.data.confine import ROOTS_ENV

LOCK_NAME = ".rankzero-download.lock"

# Sandboxed jobs see the datasets dir read-only: the worker downloads first (trainer/data/prefetch.py).
FETCHED_ENV = "RANKZERO_DATA_FETCHED"  # "1": the worker fetched the built-in data set; the ranks read only


def wants_download(spec: dict[str, Any]) -> bool:
    """Does this spec ask for a built-in data set's download (`data.args.download: true`)? Torch-free."""
    if spec.get("entrypoint"):
        return False
    data = spec.get("data")
    args = data.get("args") if isinstance(data, dict) else None
    return isinstance(args, dict) and args.get("download") is True


@contextlib.contextmanager
def download_lock(root: Path, what: str) -> Iterator[None]:
    """Hold `<root>/.rankzero-download.lock` (created with `root`); say so on stderr while waiting for it."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / LOCK_NAME, "a+b") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"rankzero: waiting for another download of {what} into {root}", file=sys.stderr, flush=True)
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def expected_files(cls: Any, root: Path) -> tuple[Path, list[str]]:
    """Where torchvision data set class `cls` looks under `root`, and the files it wants there."""
    resources = getattr(cls, "resources", None)
    if resources:  # MNIST, FashionMNIST, KMNIST: <root>/<Class>/raw/<file without .gz>
        names = [os.path.splitext(os.path.basename(str(r[0])))[0] for r in resources]
        return root / cls.__name__ / "raw", names
    base = getattr(cls, "base_folder", None)
    if base:  # CIFAR10: the extracted archive
        return root / base, [str(getattr(cls, "filename", "")) + " (extracted)"]
    return root, []


def _datasets_dir() -> str | None:
    roots = [p for p in os.environ.get(ROOTS_ENV, "").split(os.pathsep) if p]
    return roots[0] if roots else None


def missing_message(cls: Any, root: Path) -> str:
    """The error for `download: false` and files that are not there: the folder and how to fill it."""
    where, names = expected_files(cls, root)
    files = f" ({', '.join(names)})" if names else ""
    text = (
        f"{cls.__name__} files are not in {str(where)!r} and data.args.download is false. Fill that folder once "
        f"and every job on this host finds it: submit one job with data.args.download true (the worker needs "
        f"network access; jobs that start meanwhile wait for that download), or copy the files there{files}."
    )
    datasets_dir = _datasets_dir()
    if datasets_dir:
        text += f" A relative data.args.root is a folder under {datasets_dir} (RANKZERO_DATASETS_DIR)."
    return text


def download_failed_message(cls: Any, root: Path, error: BaseException) -> str:
    where, _ = expected_files(cls, root)
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return (
        f"downloading {cls.__name__} into {str(root)!r} failed ({first}): the worker needs network access to "
        f"torchvision's mirrors, or put the files in {str(where)!r} yourself and set data.args.download false"
    )
