"""The project's image, built once per set of inputs: `rankzero:in-<hash>`, the hash of the Dockerfile,
.dockerignore and every file its COPY lines take from the build context (pyproject.toml, the packages,
the web files), less what .dockerignore leaves out. A tag that exists is that build, so a test run whose
inputs were built before skips the build (seconds instead of minutes; CI keeps Docker's image store).
The tags of other inputs are removed once a new one is built (`stale`): a changed pyproject.toml makes a
new ~6 GB dependency layer, and the old ones would pile up.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
from collections.abc import Iterable
from pathlib import Path

REPO = "rankzero"


def copied_sources(dockerfile: str) -> list[str]:
    """The build-context paths the Dockerfile's COPY and ADD lines name (not those `--from` a stage)."""
    sources: list[str] = []
    for line in re.sub(r"\\\n", " ", dockerfile).splitlines():
        words = line.split()  # no JSON-array form or quoted paths in the project's COPY lines
        if not words or words[0].upper() not in ("COPY", "ADD"):
            continue
        args = words[1:]
        if any(a.startswith("--from") for a in args):
            continue
        paths = [a for a in args if not a.startswith("--")]
        sources += paths[:-1]  # the last one is the destination
    return sources


def ignore_patterns(dockerignore: str) -> list[str]:
    return [line.strip().strip("/") for line in dockerignore.splitlines() if line.strip() and not line.startswith("#")]


def is_ignored(relative: str, patterns: Iterable[str]) -> bool:
    """Whether .dockerignore leaves `relative` (a path in the context, / separated) out: a pattern matches
    the path or a folder above it; `**/` matches any depth. (No `!` exceptions: the project uses none.)"""
    parts = relative.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        if pattern.startswith("**/"):
            tail = pattern[3:]
            if any(fnmatch.fnmatchcase(p, tail) for p in parts):
                return True
        elif any(fnmatch.fnmatchcase(p, pattern) for p in prefixes):
            return True
    return False


def inputs_hash(root: Path) -> str:
    """sha256 (16 hex) over the Dockerfile, .dockerignore and each file the Dockerfile copies, by path."""
    dockerfile = (root / "Dockerfile").read_text()
    dockerignore = (root / ".dockerignore").read_text()
    patterns = ignore_patterns(dockerignore)
    files: set[Path] = set()
    for source in copied_sources(dockerfile):
        path = root / source
        found = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        files |= {p for p in found if not is_ignored(p.relative_to(root).as_posix(), patterns)}
    digest = hashlib.sha256(b"Dockerfile\0" + dockerfile.encode() + b"\0.dockerignore\0" + dockerignore.encode())
    for path in sorted(files):
        digest.update(b"\0" + path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def tag(root: Path) -> str:
    return f"{REPO}:in-{inputs_hash(root)}"


def stale(tags: Iterable[str], keep: str) -> list[str]:
    """The input-hash tags other than `keep` (what `docker image ls rankzero` lists as repo:tag)."""
    return sorted(t for t in tags if t.startswith(f"{REPO}:in-") and t != keep)
