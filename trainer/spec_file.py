"""Read a job spec from a JSON or YAML file (torch-free, so the CLI can use it too)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from trainer.spec import JobSpec
from trainer.spec_text import SpecTextError, load_spec_text

# The run's spec.json is written indented (dump_spec): a spec whose args are at their 16 KiB limit can
# pass the 64 KiB meant for typed text, so files get more room; aliases and depth stay refused.
MAX_SPEC_FILE_BYTES = 1024 * 1024


def load_spec(path: str | Path) -> JobSpec:
    """Parse and validate `path`; `.json` is read as JSON, everything else as YAML (which reads JSON too)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise FileNotFoundError(f"cannot read the spec file {path}: {exc.strerror}; pass --spec PATH") from exc
    try:
        raw = load_spec_text(text, filename=path.name, max_bytes=MAX_SPEC_FILE_BYTES)
    except SpecTextError as exc:
        raise SpecTextError(f"{path}: {exc}") from None
    try:
        return JobSpec.model_validate(raw)
    except ValidationError as exc:
        raise ValueError(f"invalid job spec in {path}:\n{exc}") from exc


def dump_spec(spec: JobSpec) -> str:
    """The canonical JSON the trainer writes to `<run>/spec.json` (every default filled in)."""
    return json.dumps(spec.model_dump(mode="json"), indent=2) + "\n"
