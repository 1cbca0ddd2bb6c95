"""Debian's apt-get as the suite's set-up runs it (tests/machine.py, tests/deploy/docker_host.py,
tests/slurm/cluster.py): another apt run (`make test`'s own, or the machine's) may hold dpkg's lock, so each
call waits for it rather than fail. Standard library only: the machine's python3 imports it before the venv."""

APT_GET = ["apt-get", "-o", "DPkg::Lock::Timeout=600"]
