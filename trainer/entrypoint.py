"""A script job's `entrypoint`: what torchrun runs instead of the built-in trainer (torch-free).

    "train.py --epochs 3"           a script inside the job's code bundle, then its arguments
    "-m mypkg.train --lr 0.1"       a module inside the bundle (python -m), then its arguments

Parsed like a POSIX shell line (shlex: quotes group words) but no shell ever runs it: the words go
to torchrun as they are. In the arguments (only there) `${RANKZERO_DATASETS_DIR}`, `${RANKZERO_RUN_DIR}`
and `${RANKZERO_JOB_ID}` are replaced by the job's values when it launches (`$$` is a literal `$`); any
other `$` is refused at submit, since no shell would ever expand it. The script is a relative path
that stays inside the bundle (no absolute path, no `..`, no leading `-` that torchrun would read as
one of its own options).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import PurePosixPath

MAX_WORDS = 256
MAX_WORD_CHARS = 1024
MAX_SCRIPT_CHARS = 512
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
# The variables an entrypoint's arguments may name (rankzero/env.py names them for the ranks too).
EXPANDED = ("RANKZERO_DATASETS_DIR", "RANKZERO_RUN_DIR", "RANKZERO_JOB_ID")
_DOLLAR = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]{0,63})\}|\$")


def _expand(word: str, values: dict[str, str] | None) -> str:
    """`word` with `$$` → `$` and `${NAME}` → values[NAME] (NAME in EXPANDED); ValueError for any other `$`.
    `values` None only checks the word."""

    def one(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        if name is None or name not in EXPANDED:
            shown = m.group(0) if name is not None else "$"
            raise ValueError(
                f"entrypoint word {word!r}: {shown!r} is not expanded (no shell runs the entrypoint); only "
                + ", ".join(f"${{{n}}}" for n in EXPANDED)
                + " are; write $$ for a literal $"
            )
        return "" if values is None else values[name]

    return _DOLLAR.sub(one, word)


@dataclass(frozen=True)
class Entrypoint:
    """One of `script` / `module` is set; `args` are the script's own arguments."""

    script: str | None
    module: str | None
    args: tuple[str, ...] = ()

    def argv(self) -> list[str]:
        """The words after torchrun's own options: `<script> <args>` or `-m <module> <args>`."""
        head = ["-m", self.module] if self.module is not None else [str(self.script)]
        return [*head, *self.args]

    def expanded(self, values: dict[str, str]) -> Entrypoint:
        """The same entrypoint with its arguments' `${RANKZERO_...}` replaced by `values` (one per EXPANDED)."""
        return Entrypoint(self.script, self.module, tuple(_expand(word, values) for word in self.args))

    @property
    def target(self) -> str:
        """What runs, for messages: 'train.py' or '-m pkg.main'."""
        return f"-m {self.module}" if self.module is not None else str(self.script)


def _words(text: str) -> list[str]:
    if any((ord(c) < 32 and c not in "\t") or ord(c) == 127 for c in text):
        raise ValueError("entrypoint must be one line without NUL or control characters")
    try:
        words = shlex.split(text)
    except ValueError as exc:  # "No closing quotation", "No escaped character"
        raise ValueError(f"entrypoint cannot be parsed as words ({exc}); check its quotes") from None
    if not words:
        raise ValueError("entrypoint is empty: give a script inside the bundle, e.g. 'train.py --epochs 3'")
    if len(words) > MAX_WORDS:
        raise ValueError(f"entrypoint has {len(words)} words; the limit is {MAX_WORDS}")
    long = next((w for w in words if len(w) > MAX_WORD_CHARS), None)
    if long is not None:
        raise ValueError(f"an entrypoint word is {len(long)} characters long; the limit is {MAX_WORD_CHARS}")
    return words


def _check_module(words: list[str]) -> str:
    if len(words) < 2:
        raise ValueError("entrypoint '-m' needs a module name after it, e.g. '-m mypkg.train'")
    module = words[1]
    if not _MODULE.match(module) or len(module) > MAX_SCRIPT_CHARS:
        raise ValueError(f"entrypoint module {module!r} is not a dotted Python module name (like mypkg.train)")
    return module


def _check_script(script: str) -> str:
    if script.startswith("-"):
        raise ValueError(
            f"entrypoint starts with {script!r}: give the script first ('train.py --epochs 3') or '-m module'"
        )
    if len(script) > MAX_SCRIPT_CHARS:
        raise ValueError(f"the entrypoint script path has {len(script)} characters; the limit is {MAX_SCRIPT_CHARS}")
    if "\\" in script:
        raise ValueError(f"entrypoint script {script!r}: use '/' between folders")
    path = PurePosixPath(script)
    if path.is_absolute() or script.startswith("~"):
        raise ValueError(f"entrypoint script {script!r} is absolute: give its path inside the code bundle")
    if ".." in path.parts:
        raise ValueError(f"entrypoint script {script!r} leaves the code bundle ('..'): give a path inside it")
    if path.name in ("", "."):
        raise ValueError(f"entrypoint script {script!r} names no file")
    return str(path)


def parse_entrypoint(text: str) -> Entrypoint:
    """The entrypoint's script or module and arguments; ValueError saying what is wrong otherwise."""
    words = _words(text)
    if words[0] == "-m":
        entry = Entrypoint(script=None, module=_check_module(words), args=tuple(words[2:]))
    else:
        entry = Entrypoint(script=_check_script(words[0]), module=None, args=tuple(words[1:]))
    for word in entry.args:
        _expand(word, None)  # only the names it expands; the values come at launch
    return entry
