"""What an upload leaves out, and why: the files of a code folder that an ignore file excludes, each with
the ignore file, line and pattern that decided, largest first (`rankzero submit --code` prints them).

The same rules as `pack.collect` (gitignore syntax at any depth; the deepest file with a matching rule
decides; at one level `.rankzeroignore` before `.gitignore`, so `!pattern` there re-includes what
`.gitignore` leaves out). A folder excluded whole is one entry with the bytes and files under it.
`.git` and `__pycache__` (never packed) are not reported.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

import pathspec

from core.bundles.format import IGNORE_FILES, INCOMING_PREFIX, NEVER_PACKED, BundleError, parse_ref, store_dir
from core.bundles.include import Includes

if TYPE_CHECKING:  # annotations only: importing the settings costs a CLI start 0.25 s
    from core.settings import Settings

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


def excluded(folder: Path, include: Includes | None = None) -> list[Excluded]:
    """What the ignore files leave out of `folder`'s bundle, largest first (`include`: globs taken whatever
    they say, core/bundles/include.py: a folder that may hold one is walked and its files reported each)."""
    inc = include or Includes(())
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
            if rule is None or (inc and inc.may_hold(rel)):
                kept.append(name)
            else:
                size, count = _size_of(here / name)
                out.append(Excluded(rel + "/", size, count, rule))
        dirnames[:] = kept
        for name in sorted(filenames):
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if PurePosixPath(rel).name in NEVER_PACKED:
                continue
            rule = None if inc.file(rel) else _decide(rel, False, rules)
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


# --- the record of an upload (issue 27): the job page lists it, a failure headline names it ------------------
# Kept beside the bundle in the store (`<sha256>.left-out.json`, PUT /api/code/<sha256>/left-out by
# `rankzero submit --code`), not inside it: a file the ignore files leave out (a log, a checkpoint) may
# change at every submit, and must not change the bundle's sha256 or make it upload again. The latest
# submit of a bundle writes its record.

MAX_RECORDED = 1000  # entries recorded, largest first; the totals count them all
MAX_RECORD_BYTES = 1 << 20
RECORD_SUFFIX = ".left-out.json"


def record_path(settings: Settings, sha256: str) -> Path:
    return store_dir(settings) / f"{parse_ref(sha256)}{RECORD_SUFFIX}"


def to_json(items: list[Excluded]) -> bytes:
    """The record of what the upload left out (largest first, at most MAX_RECORDED entries)."""
    entries = [
        {"path": e.path, "bytes": e.bytes, "files": e.files, "file": e.rule.file, "line": e.rule.line,
         "pattern": e.rule.pattern}
        for e in items[:MAX_RECORDED]
    ]  # fmt: skip
    record = {"files": sum(e.files for e in items), "bytes": sum(e.bytes for e in items), "entries": entries}
    return json.dumps(record, sort_keys=True, separators=(",", ":")).encode()


def from_json(data: bytes) -> list[Excluded]:
    """The entries of a record (ill-formed entries skipped; a record over MAX_RECORD_BYTES reads as none):
    it came from the user's machine, so every field is checked."""
    if len(data) > MAX_RECORD_BYTES:
        return []
    try:
        record = json.loads(data)
    except ValueError:
        return []
    raw = record.get("entries") if isinstance(record, dict) else None
    out = []
    for e in raw[:MAX_RECORDED] if isinstance(raw, list) else []:
        try:
            rule = Rule(str(e["file"])[:300], int(e["line"]), str(e["pattern"])[:300])
            out.append(Excluded(str(e["path"])[:1000], int(e["bytes"]), int(e["files"]), rule))
        except (KeyError, TypeError, ValueError):
            continue
    return out


def read_record(settings: Settings, sha256: str) -> list[Excluded]:
    """The stored record of a bundle's latest upload ([] when none was sent)."""
    try:
        with open(record_path(settings, sha256), "rb") as fh:
            return from_json(fh.read(MAX_RECORD_BYTES + 1))
    except (OSError, BundleError):
        return []


def write_record(settings: Settings, sha256: str, items: list[Excluded]) -> None:
    """Store the record of a stored bundle's upload (atomically: a reader sees the old one or the new one)."""
    path = record_path(settings, sha256)
    tmp = path.with_name(f"{INCOMING_PREFIX}{path.name}.{os.getpid()}")
    tmp.write_bytes(to_json(items))
    os.replace(tmp, path)


# What Python (and most tools) print when a file is missing: the path is the quoted part.
_MISSING = re.compile(
    r"(?:No such file or directory|FileNotFoundError|not found|cannot open)[^'\"\n]*['\"]([^'\"\n]{1,1000})['\"]"
)


def _relative(path: str) -> str:
    """A path as the job saw it, relative to its code folder where it can tell (`./x`, `<code>/x`, `/…/code/x`)."""
    path = path.removeprefix("./")
    for marker in ("<code>/", "/code/"):
        if marker in path:
            path = path.rsplit(marker, 1)[1]
    return PurePosixPath(path).as_posix()


def left_out_in(error: str, items: list[Excluded]) -> tuple[str, Excluded] | None:
    """The first missing path an error names that the upload left out, with its entry (None: none)."""
    for quoted in _MISSING.findall(error):
        rel = _relative(quoted)
        for e in items:
            whole = e.path.rstrip("/")
            inside = e.path.endswith("/") and f"/{whole}/" in f"/{rel}/"  # a file of a folder left out whole
            if rel == whole or rel.endswith("/" + whole) or inside:
                return quoted, e
    return None


def headline(error: str, items: list[Excluded]) -> str | None:
    """'data/train.bin was left out of the upload by .gitignore line 3 `*.bin`' when the error is a missing
    file the upload left out (the failure's headline then starts with it), else None."""
    found = left_out_in(error, items)
    if found is None:
        return None
    _, e = found
    return (
        f"{e.path} was left out of the upload by {e.why()} (add `!{e.rule.pattern.lstrip('!')}` to .rankzeroignore, "
        "or pass --include, to upload it)"
    )
