"""Where the paths a spec names for its data may point (torch-free: the API checks them at submit,
the trainer again before it touches the filesystem).

A built-in data set that reads files names one folder: `data.args.root` (mnist, fashion_mnist,
cifar10; created and filled when `download` is true) or `data.args.path` (image_folder). It must
resolve, symlinks followed, inside one of the allowed roots (the service's datasets dir first: a
relative path resolves under it), and must neither be nor contain a protected folder (the data
dir, the runs dir), nor lie inside one unless it lies inside an allowed root that is itself below
that folder (the datasets dir under the data dir is fine; the drain flags, the database and other
jobs' run dirs are not).

The worker hands the rules to the ranks in two environment variables; a trainer run by hand
without them reads whatever folder the spec names.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainer.catalogue import DATA

ROOTS_ENV = "RANKZERO_TRAINER_DATA_ROOTS"  # os.pathsep-separated; the first is the base of relative paths
PROTECTED_ENV = "RANKZERO_TRAINER_PROTECTED_DIRS"  # os.pathsep-separated

# The built-in data sets that read a folder, and the arg that names it.
# Built-in data set → the arg that names its folder (from the catalogue).
PATH_ARGS = {name: entry.path_arg for name, entry in DATA.items() if entry.path_arg is not None}

_PERCENT_ENCODED = re.compile(r"%[0-9A-Fa-f]{2}")


class UnsafeDataPath(ValueError):
    """A data path that is malformed or points outside the allowed folders; the message says which."""


def path_arg(data_name: str) -> str | None:
    """The arg of built-in data set `data_name` that names a folder (None: it reads no files)."""
    return PATH_ARGS.get(data_name)


def _within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _check_text(raw: Any, field: str) -> str:
    if not isinstance(raw, str) or not raw:
        raise UnsafeDataPath(f"{field} must be a non-empty folder path (a string)")
    if any(ord(c) < 32 or ord(c) == 127 for c in raw):
        raise UnsafeDataPath(f"{field} contains NUL or control characters")
    if _PERCENT_ENCODED.search(raw):
        raise UnsafeDataPath(f"{field} contains percent-encoding; give the plain folder path")
    return raw


def _protected_hit(candidate: Path, roots: Sequence[Path], protected: Sequence[Path]) -> Path | None:
    for folder in protected:
        if _within(folder, candidate):
            return folder  # the path is the protected folder or a folder above it
        below_root = any(_within(candidate, r) and r != folder and _within(r, folder) for r in roots)
        if _within(candidate, folder) and not below_root:
            return folder
    return None


def confine(raw: Any, field: str, roots: Sequence[Path], protected: Sequence[Path] = ()) -> Path:
    """The resolved folder `raw` names, if it is allowed; else UnsafeDataPath naming `field` and the roots."""
    text = _check_text(raw, field)
    if not roots:
        raise UnsafeDataPath(f"{field}: no data set folders are allowed on this server")
    roots = [Path(r).resolve() for r in roots]
    protected = [Path(p).resolve() for p in protected]
    allowed = ", ".join(str(r) for r in roots)
    try:
        candidate = (roots[0] / text).resolve()  # an absolute `text` replaces the base
    except (OSError, RuntimeError) as exc:  # a symlink loop, a name too long
        raise UnsafeDataPath(f"{field} cannot be resolved ({type(exc).__name__}); give a plain folder path") from None
    if not any(_within(candidate, r) for r in roots):
        raise UnsafeDataPath(
            f"{field} {str(candidate)!r} is outside the allowed data set folders ({allowed}); "
            "put the data under one of them (RANKZERO_DATASETS_DIR, RANKZERO_DATASET_ROOTS)"
        )
    hit = _protected_hit(candidate, roots, protected)
    if hit is not None:
        raise UnsafeDataPath(
            f"{field} {str(candidate)!r} overlaps the service's own folder {str(hit)!r}; "
            f"use a folder under the allowed data set folders ({allowed}) that holds only data"
        )
    return candidate


def env_rules(roots: Sequence[Path], protected: Sequence[Path]) -> dict[str, str]:
    """The environment variables that hand these rules to the ranks."""
    return {
        ROOTS_ENV: os.pathsep.join(str(Path(r).resolve()) for r in roots),
        PROTECTED_ENV: os.pathsep.join(str(Path(p).resolve()) for p in protected),
    }


def _env_paths(name: str) -> list[Path]:
    return [Path(p) for p in os.environ.get(name, "").split(os.pathsep) if p]


def confine_from_env(raw: Any, field: str) -> Path:
    """In a rank the worker launched (ROOTS_ENV set): `confine` with its rules. Run by hand: the path as given."""
    if ROOTS_ENV not in os.environ:
        return Path(_check_text(raw, field))
    return confine(raw, field, _env_paths(ROOTS_ENV), _env_paths(PROTECTED_ENV))
