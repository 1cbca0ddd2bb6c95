"""A Docker engine and the base images the project's Dockerfile and docker-compose.yml name, on a
machine that has neither a running daemon nor a reachable registry (CI).

- `ensure_engine()`: Debian's docker.io (and debootstrap) installed where absent; a daemon started where
  none answers, with no bridge and no iptables rules (containers use host networking). It returns a
  `stop` for what it started, and nothing else. Compose is v2, from PyPI: tests/deploy/compose_v2.py.
- `ensure_bases()`: stand-ins for python:3.11-slim-bookworm, node:22-bookworm-slim, postgres:16-bookworm
  and redis:7.4-alpine, built from Debian packages (debootstrap --variant=minbase bookworm → docker
  import → tests/deploy/standins/*/Dockerfile) and tagged with those exact names. They carry this
  host's CA bundle (pip and npm reach their registries through it inside builds): test-only, never the
  project's image. An existing tag is kept, so only the first run on a machine builds them.

`python -m tests.deploy.docker_host` does both (and leaves the daemon running).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tests.deploy import image_cache
from tests.support.apt import APT_GET

HERE = Path(__file__).resolve().parent
STANDINS = HERE / "standins"
MINBASE = "rankzero-standin/bookworm-minbase:1"
LABEL = "rankzero.standin"  # the hash of the stand-in's folder it was built from
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
# tag → the stand-in's folder under tests/deploy/standins/
BASES = {
    "python:3.11-slim-bookworm": "python",
    "node:22-bookworm-slim": "node",
    "postgres:16-bookworm": "postgres",
    "redis:7.4-alpine": "redis",
}
# Debian's apt refuses index files whose Valid-Until passed when the clock is off; harmless elsewhere.
APT_CONF = 'Acquire::Check-Valid-Until "false";\nAcquire::Check-Date "false";\n'


def run(cmd: list[str], timeout: float = 600, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, check=True, text=True, timeout=timeout, **kw)


def engine_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0


def _install_packages() -> None:
    missing = [p for p, exe in (("docker.io", "dockerd"), ("debootstrap", "debootstrap")) if shutil.which(exe) is None]
    if shutil.which("docker") is None and "docker.io" not in missing:
        missing.append("docker.io")
    if missing:
        env = os.environ | {"DEBIAN_FRONTEND": "noninteractive"}
        run([*APT_GET, "update", "-qq"], env=env, capture_output=True)
        run([*APT_GET, "install", "-y", "-qq", *missing], env=env, capture_output=True, timeout=900)


def start_daemon() -> int:
    """Start dockerd with no bridge and no iptables rules (containers use host networking), detached, and
    wait until it answers; its pid."""
    log = tempfile.NamedTemporaryFile(prefix="rankzero-dockerd-", suffix=".log", delete=False)  # noqa: SIM115 (open while dockerd runs)
    proc = subprocess.Popen(
        ["dockerd", "--bridge=none", "--iptables=false", "--ip6tables=false"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    log.close()  # dockerd has its own copy
    for _ in range(120):
        if engine_answers():
            return proc.pid
        if proc.poll() is not None:
            raise RuntimeError(f"dockerd exited with {proc.returncode}; see {log.name}")
        time.sleep(0.5)
    raise RuntimeError(f"dockerd did not answer within 60 s; see {log.name}")


def stop_daemon(pid: int, grace_s: float = 60) -> None:
    """SIGTERM the daemon at `pid` (this process's child or not), wait until it is gone, SIGKILL after `grace_s`."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # reap it where it is our child (else it stays a zombie)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def ensure_engine() -> Callable[[], None]:
    """A daemon that answers `docker info`; the returned function stops it if this call started it."""
    _install_packages()
    if engine_answers():
        return lambda: None
    pid = start_daemon()
    return lambda: stop_daemon(pid)


def image_exists(tag: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", tag], capture_output=True, timeout=30).returncode == 0


def _build_minbase() -> None:
    with tempfile.TemporaryDirectory(prefix="rankzero-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        run(["debootstrap", "--variant=minbase", "--include=ca-certificates", "bookworm", str(rootfs),
             "http://deb.debian.org/debian"], capture_output=True, timeout=1200)  # fmt: skip
        shutil.copyfile(CA_BUNDLE, rootfs / "etc/ssl/certs/ca-certificates.crt")
        (rootfs / "etc/apt/apt.conf.d/99rankzero-standin").write_text(APT_CONF)
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        run(["docker", "import", "-", MINBASE], stdin=tar.stdout, capture_output=True)
        if tar.wait() != 0:
            raise RuntimeError("tar of the bookworm rootfs failed")


def _folder_hash(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def _label(tag: str) -> str:
    done = subprocess.run(["docker", "image", "inspect", "--format", '{{index .Config.Labels "' + LABEL + '"}}', tag],
                          capture_output=True, text=True, timeout=30)  # fmt: skip
    return done.stdout.strip() if done.returncode == 0 else ""


def ensure_bases(rebuild: bool = False) -> list[str]:
    """Build the stand-ins that are missing or whose folder changed since (a label holds its hash); the tags built."""
    built = []
    for tag, folder in BASES.items():
        version = _folder_hash(STANDINS / folder)
        if _label(tag) == version and not rebuild:
            continue
        if not image_exists(MINBASE):
            _build_minbase()
        run(["docker", "build", "--network", "host", "--label", f"{LABEL}={version}", "-t", tag,
             str(STANDINS / folder)], capture_output=True)  # fmt: skip
        built.append(tag)
    return built


def remove_stale_tags(keep: str) -> list[str]:
    """Remove the project's input-hash tags other than `keep` (each holds a ~6 GB dependency layer when
    pyproject.toml changed); the ones removed. A tag in use by a container stays (no --force)."""
    listed = subprocess.run(["docker", "image", "ls", image_cache.REPO, "--format", "{{.Repository}}:{{.Tag}}"],
                            capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    removed = []
    for tag in image_cache.stale(listed.stdout.split(), keep):
        done = subprocess.run(["docker", "image", "rm", tag], capture_output=True, timeout=120, check=False)
        if done.returncode == 0:
            removed.append(tag)
    return removed


if __name__ == "__main__":
    ensure_engine()
    print("built:", ensure_bases() or "nothing (all cached)")
