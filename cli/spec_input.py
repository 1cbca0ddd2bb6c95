"""A job spec as the user gives it on the command line: read from a YAML or JSON file (`-`: standard input), then
`--set PATH=VALUE` and `--name` applied. Shared by `rankzero submit`, `clone` and `sweep` (cli/job_commands.py,
cli/clone_command.py, cli/sweep_commands.py), which therefore need not import each other."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from cli.app import fail
from trainer.spec_text import SpecTextError, load_spec_text


def load_spec(path: Path) -> dict[str, Any]:
    """The spec mapping in a YAML or JSON file (`-`: standard input), read by the one spec-text loader the API
    and trainer use."""
    try:
        text = sys.stdin.buffer.read() if str(path) == "-" else path.read_bytes()
    except OSError as exc:
        fail(f"cannot read {path}: {exc}")
    try:
        return load_spec_text(text, filename=path.name)
    except SpecTextError as exc:
        fail(f"{path}: {exc}; see `rankzero schema`")


MAX_SETS = 64


def with_overrides(spec: dict[str, Any], assignments: list[str], name: str | None) -> dict[str, Any]:
    """`spec` with each `path=value` set (the value read as a YAML scalar: 0.01, true, adamw) and `name`."""
    if not assignments and name is None:
        return dict(spec)  # nothing to set: the spec model (pydantic) and yaml are not even imported (issue 29)
    import re

    import yaml

    from core.sweeps.space import set_path  # imports pydantic: only where used (issue 29, a fast CLI start)
    from trainer.spec import NAME_PATTERN, PARAM_NAME

    if len(assignments) > MAX_SETS:
        fail(f"--set given {len(assignments)} times; the limit is {MAX_SETS}", 2)
    out = dict(spec)
    for item in assignments:
        path, eq, raw = item.partition("=")
        if not eq or not PARAM_NAME.match(path):
            fail(f"--set {item[:80]!r}: write PATH=VALUE with a dotted spec path, e.g. optimizer.lr=0.01", 2)
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        if isinstance(value, (dict, list)) or value is None:
            value = raw  # a scalar only: `{a: 1}` or `~` is kept as the text given
        out = set_path(out, path, value)
    if name is not None:
        if not re.match(NAME_PATTERN, name):
            fail(f"--name {name[:80]!r}: letters, digits, '.', '_' or '-', at most 100 characters", 2)
        out["name"] = name
    return out
