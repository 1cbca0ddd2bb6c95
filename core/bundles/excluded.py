"""What an upload leaves out, and why: the files of a code folder that an ignore file excludes, each with
the ignore file, line and pattern that decided, largest first (`rankzero submit --code` prints them).

The same rules as `pack.collect` (gitignore syntax at any depth; the deepest file with a matching rule
decides; at one level `.rankzeroignore` before `.gitignore`, so `!pattern` there re-includes what
`.gitignore` leaves out). A folder excluded whole is one entry with the bytes and files under it.
`.git` and `__pycache__` (never packed) are not reported.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pathspec

from core.bundles.format import IGNORE_FILES, NEVER_PACKED

MAX_LISTED = 10  # entries printed; the rest are summed on one line


@dataclass(frozen=True)
class Rule:
    file: str  # the ignore file, relative to the folder (".gitignore", "data/.rankzeroignore")
    line: int  # 1-based
    pattern: str


@dataclass(frozen=True)
class Excluded:
    path: str  # relative to the folder; a folder ends with "/"
    bytes: int
    files: int
    rule: Rule

    def why(self) -> str:
        return f"{self.rule.file} line {self.rule.line} `{self.rule.pattern}`"


@dataclass(frozen=True)
class _Rules:
    base: str  # folder of the ignore file, relative to the root ("" at the top)
    file: str
    lines: list[str]
    spec: pathspec.GitIgnoreSpec


def _read(folder: Path, rel: str) -> list[_Rules]:
    found = []
    for name in reversed(IGNORE_FILES):  # `_decide` reads from the end: `.rankzeroignore` first at one level
        path = folder / name
        if path.is_file() and not path.is_symlink():
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
            # A blank line makes no pattern in pathspec: a comment in its place keeps index = line - 1.
            spec = pathspec.GitIgnoreSpec.from_lines([line if line.strip() else "#" for line in lines])
            found.append(_Rules(rel, f"{rel}/{name}" if rel else name, lines, spec))
    return found


def _decide(rel: str, is_dir: bool, rules: list[_Rules]) -> Rule | None:
    """The rule that excludes `rel`, or None when it is packed."""
    for r in reversed(rules):
        sub = rel[len(r.base) + 1 :] if r.base else rel
        result = r.spec.check_file(sub + "/" if is_dir else sub)
        if result.include is not None:
            if not result.include or result.index is None:
                return None
            return Rule(r.file, result.index + 1, r.lines[result.index].strip())
    return None


def _size_of(folder: Path) -> tuple[int, int]:
    total = count = 0
    for dirpath, _dirs, names in os.walk(folder):
        for name in names:
            try:
                total += (Path(dirpath) / name).lstat().st_size
                count += 1
            except OSError:
                pass
    return total, count


def excluded(folder: Path) -> list[Excluded]:
    """What the ignore files leave out of `folder`'s bundle, largest first."""
    root = folder.resolve()
    out: list[Excluded] = []
    rules_of: dict[str, list[_Rules]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        rel_dir = here.relative_to(root).as_posix()
        rel_dir = "" if rel_dir == "." else rel_dir
        rules = (rules_of.get(rel_dir.rpartition("/")[0], []) if rel_dir else []) + _read(here, rel_dir)
        rules_of[rel_dir] = rules
        kept = []
        for name in sorted(dirnames):
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if name in NEVER_PACKED:
                continue
            rule = _decide(rel, True, rules)
            if rule is None:
                kept.append(name)
            else:
                size, count = _size_of(here / name)
                out.append(Excluded(rel + "/", size, count, rule))
        dirnames[:] = kept
        for name in sorted(filenames):
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if PurePosixPath(rel).name in NEVER_PACKED:
                continue
            rule = _decide(rel, False, rules)
            if rule is not None:
                try:
                    size = (here / name).lstat().st_size
                except OSError:
                    size = 0
                out.append(Excluded(rel, size, 1, rule))
    return sorted(out, key=lambda e: (-e.bytes, e.path))


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


def report(items: list[Excluded], limit: int = MAX_LISTED) -> list[str]:
    """Lines for a terminal: the total, then each entry (largest first) with the rule that excluded it."""
    if not items:
        return []
    files = sum(e.files for e in items)
    lines = [f"code: left out {files:,} file{'s' if files != 1 else ''}, {_mb(sum(e.bytes for e in items))}:"]
    width = min(max(len(e.path) for e in items[:limit]), 60)
    lines += [f"  {e.path:<{width}}  {_mb(e.bytes):>10}  {e.why()}" for e in items[:limit]]
    rest = items[limit:]
    if rest:
        lines.append(f"  … and {len(rest)} more ({_mb(sum(e.bytes for e in rest))})")
    lines.append("  (a line `!PATTERN` in .rankzeroignore puts a file back; .rankzeroignore decides before .gitignore)")
    return lines


def named_by(entrypoint: str, items: list[Excluded]) -> list[tuple[str, Excluded]]:
    """(word, entry) for each word of the entrypoint's arguments (`--data=x` too) that names an excluded path."""
    try:
        words = shlex.split(entrypoint)
    except ValueError:
        return []
    found = []
    for word in words:
        candidate = word.split("=", 1)[1] if word.startswith("-") and "=" in word else word
        path = PurePosixPath(candidate.removeprefix("./")).as_posix()
        for e in items:
            if path == e.path.rstrip("/") or (e.path.endswith("/") and path.startswith(e.path)):
                found.append((candidate, e))
                break
    return found


def warnings(entrypoint: str | None, items: list[Excluded]) -> list[str]:
    """A warning per entrypoint argument that names a path the upload leaves out."""
    if not isinstance(entrypoint, str) or not entrypoint:
        return []
    return [
        f"warning: the entrypoint names {word}, which {e.why()} leaves out of the upload; the job will not find "
        f"it: add `!{e.rule.pattern.lstrip('!')}` (or `!{e.path}`) to .rankzeroignore to upload it"
        for word, e in named_by(entrypoint, items)
    ]
