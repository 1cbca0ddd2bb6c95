"""What the API and the workers share about a job's own packages (spec `environment`, worker/environments/):
the torch family, reading a requirements file's text, and the estimate the API gives at submit of a job that
brings its own torch (a full environment of its own on each host, GBs).

The estimate is honest about what it is: the installed size of this server's own torch family (torch,
torchvision, torchaudio, triton and the CUDA wheels), read from their RECORD files, which the job's torch
replaces with builds of the same kind; the build log and GET /api/jobs/{id}/environment give the real size.
"""

from __future__ import annotations

import importlib.metadata
import sys
import tarfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

# The packages whose wheels are the heavy part of the service's environment (CUDA included): kept from the
# service unless the job names one of TORCH_NAMES itself.
TORCH_NAMES = frozenset({"torch", "torchvision", "torchaudio"})
MAX_FILE_BYTES = 65_536
# A bundle is a gzip'd tar: its requirements file is looked for in the first this-many bytes of it only, so a
# submit never decompresses a large bundle (past it the estimate leaves the file out, and says so).
BUNDLE_SCAN_BYTES = 64 * 1024 * 1024
# When this server has no torch to measure: a CUDA build of torch 2.x with its CUDA wheels, installed.
FALLBACK_TORCH_BYTES = 5_000_000_000


class RequirementsError(ValueError):
    """The job's requirements cannot be read; the message says which and what to do."""


def is_torch_family(name: str) -> bool:
    n = canonicalize_name(name)
    return n in TORCH_NAMES or n == "triton" or n.startswith(("nvidia-", "cuda-"))


def lines_of(text: str) -> list[str]:
    """A requirements.txt's requirements: comments and blank lines left out (not checked here)."""
    out = []
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if line:
            out.append(line)
    return out


def from_pyproject(text: str, where: str) -> list[str]:
    """A pyproject.toml's [project] dependencies."""
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


def requirements_in(text: str, name: str) -> list[str]:
    """The requirements of a file's text, by its kind (`name`: its path in the bundle)."""
    return from_pyproject(text, name) if Path(name).name == "pyproject.toml" else lines_of(text)


def bundle_file(archive: Path, name: str, scan_bytes: int = BUNDLE_SCAN_BYTES) -> str | None:
    """The text of the regular file `name` in a bundle (a gzip'd tar), if found within its first `scan_bytes`
    of tar stream and at most MAX_FILE_BYTES long; None otherwise (the worker reads it when the job starts)."""
    wanted = name.strip("/").removeprefix("./")
    try:
        with tarfile.open(archive, mode="r|gz") as tar:
            for member in tar:
                if member.offset > scan_bytes:
                    return None
                if member.name.removeprefix("./") == wanted:
                    if not member.isreg() or member.size > MAX_FILE_BYTES:
                        return None
                    fh = tar.extractfile(member)
                    return fh.read().decode(errors="replace") if fh is not None else None
    except (OSError, tarfile.TarError, EOFError):
        return None
    return None


@dataclass(frozen=True)
class ServiceTorch:
    """This server's torch family: versions by canonical name, and the disk its files take."""

    versions: dict[str, str]
    size_bytes: int


@lru_cache(maxsize=1)
def service_torch() -> ServiceTorch:
    """Read once per process from the installed distributions' metadata (torch itself is never imported)."""
    versions: dict[str, str] = {}
    size = 0
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if not name or not is_torch_family(name) or canonicalize_name(name) in versions:
            continue
        versions[canonicalize_name(name)] = dist.version
        size += sum(f.size or 0 for f in dist.files or ())
    return ServiceTorch(versions, size)


@dataclass(frozen=True)
class OwnTorch:
    """A job whose requirements ask for another torch than the service's: what they ask, and its size."""

    requirements: list[str]  # those that exclude the service's version ('torch==2.3.0')
    service_torch: str | None
    size_bytes: int
    basis: str  # how the figure was made, in words

    def note(self) -> str:
        theirs = ", ".join(self.requirements)
        ours = f"torch {self.service_torch}" if self.service_torch else "no torch"
        return (
            f"environment: {theirs} is not this server's torch ({ours}), so the job gets a full environment of its "
            f"own: about {self.size_bytes / 1e9:.1f} GB on each host that runs it ({self.basis}), downloaded by "
            "its first start there. Leave torch out of the requirements to use the server's."
        )


def own_torch(requirements: list[str], service: ServiceTorch) -> OwnTorch | None:
    """Pure: the job's own torch, when a requirement naming torch, torchvision or torchaudio excludes the
    version the service has (a requirement the service's version satisfies resolves to it: no own copy)."""
    asked = []
    for text in requirements:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue  # refused with its reason by the spec's check or at the job's start
        name = canonicalize_name(req.name)
        if name not in TORCH_NAMES:
            continue
        have = service.versions.get(name)
        if have is None or not req.specifier.contains(have, prereleases=True):
            asked.append(text)
    if not asked:
        return None
    if service.size_bytes > 0:
        size, basis = service.size_bytes, "the installed size of this server's own torch and CUDA wheels"
    else:
        size, basis = FALLBACK_TORCH_BYTES, "a typical CUDA build of torch with its CUDA wheels"
    return OwnTorch(asked, service.versions.get("torch"), size, basis)
