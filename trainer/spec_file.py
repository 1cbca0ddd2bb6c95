"""Read a job spec from a JSON or YAML file (torch-free, so the CLI can use it too)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from trainer.spec import JobSpec


def load_spec(path: str | Path) -> JobSpec:
    """Parse and validate `path`; `.yaml`/`.yml` are read as YAML, everything else as JSON."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise FileNotFoundError(f"cannot read the spec file {path}: {exc.strerror}; pass --spec PATH") from exc
    if path.suffix.lower() in (".yaml", ".yml"):
        import yaml

        raw = yaml.safe_load(text)
    else:
        raw = json.loads(text)
    if not isinstance(raw, dict):
        raise ValueError(f"{path} must hold one JSON/YAML object (the job spec), not {type(raw).__name__}")
    try:
        return JobSpec.model_validate(raw)
    except ValidationError as exc:
        raise ValueError(f"invalid job spec in {path}:\n{exc}") from exc


def dump_spec(spec: JobSpec) -> str:
    """The canonical JSON the trainer writes to `<run>/spec.json` (every default filled in)."""
    return json.dumps(spec.model_dump(mode="json"), indent=2) + "\n"
