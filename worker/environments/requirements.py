"""What a job asks for: its spec's packages and its bundle's requirements file, as one normalised list.

Pure apart from reading the one file inside the job's unpacked bundle (its text read as the API reads it for
its estimate at submit: core/environments.py). Every line goes through the spec's own rule
(`trainer.spec.check_requirement`: no options, no URLs or paths), so a requirements file cannot point uv at
another index or at code outside the lock.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from core.environments import MAX_FILE_BYTES, TORCH_NAMES, RequirementsError, is_torch_family, requirements_in
from trainer.spec import MAX_PACKAGES, EnvironmentSpec, check_requirement

__all__ = ["RequirementsError", "gather", "input_hash", "is_torch_family", "names_own_torch", "read_file"]


def read_file(code_dir: Path | None, relative: str) -> list[str]:
    """The requirements in the bundle's file `relative` (a requirements.txt or a pyproject.toml)."""
    if code_dir is None:
        raise RequirementsError("environment.requirements names a file in the code bundle, and the job has none")
    root = code_dir.resolve()
    path = (root / relative).resolve()
    if root not in path.parents or not path.is_file():
        raise RequirementsError(f"environment.requirements: {relative} is not a file in the code bundle")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise RequirementsError(f"{relative} is larger than {MAX_FILE_BYTES:,} bytes: list only the requirements")
    return requirements_in(path.read_text(errors="replace"), relative)


def gather(spec: EnvironmentSpec, code_dir: Path | None) -> list[str]:
    """Every requirement the job names, checked, deduplicated and sorted (the resolution's input)."""
    given = [*(read_file(code_dir, spec.requirements) if spec.requirements else []), *spec.packages]
    if len(given) > MAX_PACKAGES:
        raise RequirementsError(f"the job names {len(given)} requirements; at most {MAX_PACKAGES}")
    checked = []
    for line in given:
        try:
            checked.append(check_requirement(line))
        except ValueError as exc:
            raise RequirementsError(f"{spec.requirements or 'environment.packages'}: {exc}") from None
    return sorted(set(checked))


def names_own_torch(requirements: list[str]) -> bool:
    """The job pins its own torch (or torchvision, torchaudio): it gets those wheels, CUDA's too, of its own."""
    return any(canonicalize_name(Requirement(r).name) in TORCH_NAMES for r in requirements)


def input_hash(requirements: list[str]) -> str:
    return hashlib.sha256("\n".join(requirements).encode()).hexdigest()


def environment_of(spec: Any) -> EnvironmentSpec | None:
    env = getattr(spec, "environment", None)
    return env if isinstance(env, EnvironmentSpec) else None
