"""`rankzero submit --code DIR --include GLOB`: paths the upload takes whatever the ignore files say.

Precedence (docs/your-code.md "What is uploaded"), strongest first:
1. `.git` and `__pycache__`: never uploaded;
2. `--include GLOB` (gitignore syntax, relative to DIR, repeatable): always uploaded;
3. the deepest ignore file with a matching line decides, and at one level `.rankzeroignore` before
   `.gitignore` (so `!pattern` in `.rankzeroignore` re-includes what `.gitignore` leaves out);
4. everything else is uploaded.
A folder an ignore file leaves out is still walked when an include could match inside it (a glob
without a `/` can match at any depth; `data/*.bin` only under `data/`); its other files stay out.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePosixPath

import pathspec

from core.bundles.format import BundleError

MAX_INCLUDES = 100
MAX_GLOB_CHARS = 300
_GLOB_CHARS = "*?[!"


class Includes:
    def __init__(self, globs: Sequence[str]) -> None:
        if len(globs) > MAX_INCLUDES:
            raise BundleError(f"--include: at most {MAX_INCLUDES} globs, got {len(globs)}")
        for g in globs:
            _check(g)
        self.globs = [g.strip().removeprefix("./") for g in globs]
        self.spec = pathspec.GitIgnoreSpec.from_lines(self.globs)

    def __bool__(self) -> bool:
        return bool(self.globs)

    def file(self, rel: str) -> bool:
        """Is this file (posix, relative to the folder) forced in?"""
        return bool(self.globs) and self.spec.match_file(rel)

    def may_hold(self, rel_dir: str) -> bool:
        """Could an include match this folder or something inside it (then it is walked)?"""
        for g in self.globs:
            anchored = g.lstrip("/")
            if "/" not in anchored.rstrip("/"):
                return True  # `*.bin`, `data`: any depth
            literal = anchored.split("/")
            fixed = []
            for part in literal:
                if any(c in part for c in _GLOB_CHARS) or part == "**":
                    break
                fixed.append(part)
            prefix = "/".join(fixed)
            if not prefix or prefix == rel_dir or prefix.startswith(rel_dir + "/") or rel_dir.startswith(prefix + "/"):
                return True
        return False


def _check(glob: str) -> None:
    g = glob.strip()
    if not g or len(g) > MAX_GLOB_CHARS:
        raise BundleError(f"--include {glob!r}: give a glob of 1 to {MAX_GLOB_CHARS} characters, like 'data/*.bin'")
    if g.startswith("!") or g.startswith("#"):
        raise BundleError(f"--include {glob!r}: a glob to upload cannot start with '!' or '#'; give the path itself")
    if ".." in PurePosixPath(g.lstrip("/")).parts:
        raise BundleError(f"--include {glob!r}: a glob names paths inside the code folder; '..' leaves it")
