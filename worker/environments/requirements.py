"""What a job asks for: its spec's packages and its bundle's requirements file, as one normalised list.

Pure apart from reading the one file inside the job's unpacked bundle. Every line goes through the spec's
own rule (`trainer.spec.check_requirement`: no options, no URLs or paths), so a requirements file cannot
point uv at another index or at code outside the lock.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from trainer.spec import MAX_PACKAGES, EnvironmentSpec, check_requirement

MAX_FILE_BYTES = 65_536
# The packages whose wheels are the heavy part of the service's environment (CUDA included): kept from the
# service unless the job names one of the first three itself.
TORCH_NAMES = frozenset({"torch", "torchvision", "torchaudio"})


def is_torch_family(name: str) -> bool:
    n = canonicalize_name(name)
    return n in TORCH_NAMES or n == "triton" or n.startswith(("nvidia-", "cuda-"))


class RequirementsError(ValueError):
    """The job's requirements cannot be read; the message says which and what to do."""


def _lines(text: str) -> list[str]:
    out = []
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if line:
            out.append(line)
    return out


def _from_pyproject(text: str, where: str) -> list[str]:
    if sys.version_info < (3, 11):  # pragma: no cover (the images run 3.11+)
        raise RequirementsError(f"{where}: reading a pyproject.toml needs Python 3.11 on the worker; use a "
                                "requirements.txt")  # fmt: skip
    import tomllib

    try:
        project = tomllib.loads(text).get("project", {})
    except tomllib.TOMLDecodeError as exc:
        raise RequirementsError(f"{where} is not valid TOML: {exc}") from None
    deps = project.get("dependencies", []) if isinstance(project, dict) else []
    if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
        raise RequirementsError(f"{where}: [project] dependencies must be a list of strings")
    return deps


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
    text = path.read_text(errors="replace")
    return _from_pyproject(text, relative) if path.name == "pyproject.toml" else _lines(text)


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
