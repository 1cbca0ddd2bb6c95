"""Paths that come from users or rows, confined to the runs dir (or, for data sets, the datasets dirs).

Every path-bearing input goes through `inside_runs_dir`: NUL and control characters and
percent-encoding are refused outright (no file name of ours needs them, and a decoded-twice
`%252e%252e` must not become `..` anywhere downstream); then the path is resolved with symlinks
followed and must land inside the (resolved) runs dir, and be a regular file or a folder (a job
may leave a FIFO where its log should be: opening it would block the reader). That check is advice
only (the job may swap a link or FIFO in after it): `open_in_runs_dir` opens what it returned with no link
followed below the runs dir, non-blocking, and checks the type on the opened descriptor.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import IO, Any

from core import run_files
from core.settings import Settings
from core.tables import Job
from trainer.data import confine
from trainer.run_dir import job_run_dir

_PERCENT_ENCODED = re.compile(r"%[0-9A-Fa-f]{2}")


class UnsafePath(ValueError):
    """The path is malformed or leaves the runs dir; the message says which."""


def inside_runs_dir(raw: str | Path, runs_dir: Path, *, base: Path | None = None) -> Path:
    """Resolve `raw` (relative to `base`, default the runs dir) and return it if it stays inside `runs_dir`."""
    text = str(raw)
    if not text:
        raise UnsafePath("empty path")
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise UnsafePath("path contains NUL or control characters")
    if _PERCENT_ENCODED.search(text):
        raise UnsafePath("path contains percent-encoding; give the plain file path")
    root = runs_dir.resolve()
    start = (base or root).resolve()
    candidate = (start / text).resolve()  # absolute `text` replaces `start`; symlinks are followed
    if candidate != root and root not in candidate.parents:
        raise UnsafePath(f"path leaves the runs dir ({root}); give a file inside it")
    _refuse_special(candidate)
    return candidate


def _refuse_special(path: Path) -> None:
    """A job writes its run dir: a FIFO (or socket) where a log should be would block the API thread that
    opens it for ever (40 such reads froze every synchronous route). Only files and folders are served."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # missing: the caller says so
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise UnsafePath(f"{path.name} is not a regular file (a FIFO, socket or device); it is not read")


def open_in_runs_dir(path: Path, runs_dir: Path) -> IO[Any]:
    """`path` (as `inside_runs_dir` returned it) open for reading, no link followed below the runs dir, and a
    regular file (checked on the descriptor; opened non-blocking, so a FIFO never holds the thread).

    Raises UnsafePath when the job swapped a link, FIFO or device in after the check, FileNotFoundError when
    the file is gone (callers read the handle with a bound: a log may grow while it is read)."""
    try:
        return run_files.open_file(path, "rb", runs_dir.resolve())
    except run_files.LinkRefused:
        raise UnsafePath(
            f"{path.name} is a link or not a regular file (a FIFO, socket or device); it is not read"
        ) from None


def run_dir_of(job: Job, settings: Settings) -> Path:
    """Job `job`'s run dir (the row's, else the standard name), resolved and confined to the runs dir.

    Raises UnsafePath when a row names a directory outside the runs dir.
    """
    if job.id is None:  # a row not yet inserted has no run dir
        raise ValueError("run_dir_of needs a saved job row")
    standard = job_run_dir(settings.resolved_runs_dir, job.id)
    try:
        return inside_runs_dir(job.run_dir or str(standard), settings.resolved_runs_dir)
    except UnsafePath:
        # A host with a runs dir of its own recorded its path; what it shipped is under the standard name
        # in this runs dir (the artifact store's layout, core/artifacts/disk.py).
        if job.run_dir and Path(job.run_dir).name == standard.name:
            return inside_runs_dir(str(standard), settings.resolved_runs_dir)
        raise


def protected_dirs(settings: Settings) -> list[Path]:
    """Folders no data set path may be, contain, or lie in (except through an allowed root below them)."""
    return [settings.data_dir.resolve(), settings.resolved_runs_dir]


def inside_dataset_roots(raw: object, field: str, settings: Settings) -> Path:
    """Resolve a spec's data folder (relative: under the datasets dir) and return it if it is allowed.

    Raises UnsafePath naming `field` and the allowed folders otherwise (see trainer/data/confine.py).
    """
    try:
        return confine.confine(raw, field, settings.dataset_root_dirs, protected_dirs(settings))
    except confine.UnsafeDataPath as exc:
        raise UnsafePath(str(exc)) from None


def dataset_env(settings: Settings) -> dict[str, str]:
    """The variables that give the ranks the same data-path rules the API applied at submit."""
    return confine.env_rules(settings.dataset_root_dirs, protected_dirs(settings))
