"""What the suite needs of the machine, set up before pytest starts (`make test` runs this first).

On a fresh CI machine the Docker set-up alone (the daemon, the stand-in base images built from Debian
packages, the project's image with its ~3 GB torch layer) took as long as the rest of the suite: built by
the deploy tests' fixture, it ran beside three other pytest workers and was the run's longest path. So:

- `install`: every Debian package the suite needs and the machine lacks, in one apt transaction, in the
  foreground (one `apt-get update`, no second apt run fighting over dpkg's lock later in the run).
- `start`: the Docker set-up (tests/deploy/docker_host.py, compose_v2.py, and the project's image built
  by `docker compose build` with the deploy test's own files, tagged by its inputs: image_cache.py) in a
  background process, which overlaps the venv install and the lint. It holds `LOCK` (an flock, taken
  here and handed to the child) until it ends; the deploy fixture takes the same lock, so it waits for the
  build's end as an event, then finds everything in place (or, if the background build failed, does the
  work itself and fails with the build's own error). Its log: test-output/prepare-docker.log.
- `stop`: after the suite, stops the Docker daemon if `start` started it (and nothing else).

Standard library only: it runs with the machine's python3, before the venv exists.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.support.apt import APT_GET

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "test-output"
LOG = OUTPUT / "prepare-docker.log"
LOCK = Path(os.environ.get("RANKZERO_TEST_PREPARE_LOCK", "/tmp/rankzero-test-prepare.lock"))
DAEMON_PID = OUTPUT / "prepare-dockerd.pid"  # written only when `start` started the daemon

# Debian package → an executable (or library) that shows it is installed.
SANDBOX = {"bubblewrap": "bwrap", "libseccomp2": "libseccomp.so.2"}
BROWSER = {"chromium": "chromium"}
DOCKER = {"docker.io": "dockerd", "debootstrap": "debootstrap"}
SLURM = {"slurm-wlm": "slurmctld", "munge": "munged"}
# Jobs submitted as a site's users (tests/slurm/test_slurm_people.py): the documented sudo rule, and an ACL that lets
# those test users reach the service's Python where it lives under a private home.
SITE_USERS = {"sudo": "sudo", "acl": "setfacl"}


def _present(probe: str) -> bool:
    if ".so" in probe:  # a library: ldconfig's cache knows it
        done = subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True, text=True, check=False)
        return any(line.strip().startswith(probe + " ") for line in done.stdout.splitlines())
    return shutil.which(probe) is not None or Path("/usr/sbin", probe).exists()


def missing(wanted: dict[str, str]) -> list[str]:
    return [package for package, probe in wanted.items() if not _present(probe)]


def install() -> int:
    needed = missing(SANDBOX | BROWSER | DOCKER | SLURM | SITE_USERS)
    if not needed:
        return 0
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        print(f"not installed, and apt-get cannot install them here: {' '.join(needed)}", file=sys.stderr)
        return 0  # the tests that need them say so themselves
    print(f"installing Debian packages: {' '.join(needed)}", flush=True)
    env = os.environ | {"DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run([*APT_GET, "update", "-qq"], env=env, check=True, timeout=900)
    cmd = [*APT_GET, "install", "-y", "-qq", "--no-install-recommends", *needed]
    return subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, check=False, timeout=1800).returncode


def start() -> int:
    """Start the Docker set-up in the background, holding LOCK until it ends."""
    OUTPUT.mkdir(exist_ok=True)
    lock = os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print("the Docker set-up is already running (another `make test`?)", flush=True)
        return 0
    with LOG.open("w") as log:
        subprocess.Popen(
            [sys.executable, "-m", "tests.machine", "docker", str(lock)],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            pass_fds=(lock,), start_new_session=True,
        )  # fmt: skip
    os.close(lock)  # the child's copy holds the lock now
    print(f"Docker set-up started in the background (log: {LOG.relative_to(ROOT)})", flush=True)
    return 0


def docker(lock_fd: int) -> int:
    """The background part: engine, Compose v2, base images, the project's image. Ends (and frees the lock)."""
    from tests.deploy import compose_v2, docker_host, image_cache

    t0 = time.monotonic()
    try:
        if not docker_host.engine_answers():
            daemon = docker_host.start_daemon()
            DAEMON_PID.write_text(str(daemon))
        config = compose_v2.install()
        print(f"engine and compose: {time.monotonic() - t0:.0f} s", flush=True)
        built = docker_host.ensure_bases()
        print(f"bases built {built or 'none'}: {time.monotonic() - t0:.0f} s", flush=True)
        tag = image_cache.tag(ROOT)
        if not docker_host.image_exists(tag):
            env = os.environ | {
                "DOCKER_CONFIG": str(config),
                "RANKZERO_IMAGE": tag,
                "POSTGRES_PASSWORD": "prepare",
                "REDIS_PASSWORD": "prepare",
                "RANKZERO_API_TOKEN": "prepare",
                "RZ_TEST_API_PORT": "1",
                "RZ_TEST_PG_PORT": "1",
                "RZ_TEST_REDIS_PORT": "1",
            }
            files = ["-f", "docker-compose.yml", "-f", "tests/deploy/override.yml"]
            cmd = ["docker", "compose", *files, "-p", "rzprepare", "build", "migrate"]
            subprocess.run(cmd, cwd=ROOT, env=env, check=True, timeout=3600)
            print(f"older tags removed: {docker_host.remove_stale_tags(tag) or 'none'}", flush=True)
        print(f"image {tag} in place: {time.monotonic() - t0:.0f} s", flush=True)
        return 0
    finally:
        os.close(lock_fd)


def wait_for_start() -> None:
    """Block until a background set-up started by `start` has ended (at once when none runs)."""
    lock = os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
    finally:
        os.close(lock)  # closing frees it


def stop() -> int:
    """Stop the Docker daemon that `start` started, if it did (after the suite)."""
    wait_for_start()
    try:
        pid = int(DAEMON_PID.read_text())
    except (OSError, ValueError):
        return 0
    DAEMON_PID.unlink()
    from tests.deploy import docker_host

    docker_host.stop_daemon(pid)
    return 0


if __name__ == "__main__":
    verb = sys.argv[1] if len(sys.argv) > 1 else ""
    if verb == "install":
        sys.exit(install())
    if verb == "start":
        sys.exit(start())
    if verb == "docker":
        sys.exit(docker(int(sys.argv[2])))
    if verb == "stop":
        sys.exit(stop())
    sys.exit("usage: python3 -m tests.machine install | start | stop")
