"""Which one setting a host lacks for the job sandbox, from bwrap's failure: the worker's refusal to start
names it (docs/deploy.md "What the worker container needs"). Pure `missing_setting` over bwrap's last
error line and a few facts of the host (`HostFacts`, read by `host_facts`).

What bwrap says where each is missing (seen in a container of Debian's docker.io engine, bwrap 0.8):
- Docker's default seccomp profile (no SYS_ADMIN): "No permissions to create new namespace, likely because
  the kernel does not allow non-privileged user namespaces" (its clone with namespace flags is refused);
  with SYS_ADMIN added instead: "pivot_root: Operation not permitted". Also the words a kernel that
  allows no user namespaces gives, hence the sysctl facts.
- Docker's masked /proc paths (no systempaths=unconfined): "Can't mount proc on /newroot/proc: Operation
  not permitted".
- AppArmor's docker-default profile: mount refused with EACCES ("Permission denied").
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

SECCOMP = (
    "the container's seccomp profile: Docker's default refuses the namespace and mount calls of the sandbox; "
    "give the worker `security_opt: [seccomp=./deploy/seccomp/worker.json]` (docker-compose.yml does; "
    "`docker run --security-opt seccomp=deploy/seccomp/worker.json`)"
)
SYSTEMPATHS = (
    "`security_opt: [systempaths=unconfined]` on the worker container: Docker's masked /proc paths forbid "
    "the fresh /proc of the job's pid namespace (`docker run --security-opt systempaths=unconfined`)"
)
APPARMOR = (
    "`security_opt: [apparmor=unconfined]` on the worker container: AppArmor's docker-default profile "
    "forbids mount (`docker run --security-opt apparmor=unconfined`)"
)
USERNS_OFF = "user namespaces, which this kernel turns off: on the host, `sysctl -w {name}={value}`"
UBUNTU_RESTRICT = (
    "unprivileged user namespaces, which AppArmor restricts on this host (Ubuntu 23.10+): on the host, "
    "`sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`, or an AppArmor profile for bwrap that "
    "allows `userns`"
)


@dataclass(frozen=True)
class HostFacts:
    in_container: bool
    max_user_namespaces: int | None = None  # /proc/sys/user/max_user_namespaces
    unprivileged_userns_clone: int | None = None  # Debian's older kernels; absent upstream
    apparmor_restrict_userns: int | None = None  # Ubuntu's kernel.apparmor_restrict_unprivileged_userns


def missing_setting(error: str, facts: HostFacts) -> str | None:
    """The one setting that bwrap's `error` (its last stderr line) says is missing, as what to set; None
    when the error is none of those (bwrap's own words are then all there is)."""
    text = error.lower()
    namespace_refused = (
        "no permissions to create new namespace" in text
        or "creating new namespace failed" in text
        or "setting up uid map" in text
        or ("pivot_root" in text and "operation not permitted" in text)
    )
    if namespace_refused:
        if facts.max_user_namespaces == 0:
            return USERNS_OFF.format(name="user.max_user_namespaces", value=15000)
        if facts.unprivileged_userns_clone == 0:
            return USERNS_OFF.format(name="kernel.unprivileged_userns_clone", value=1)
        if facts.apparmor_restrict_userns == 1 and "permission denied" in text:
            return UBUNTU_RESTRICT
        if facts.in_container:
            return SECCOMP
        return None
    if "mount proc" in text and "operation not permitted" in text and facts.in_container:
        return SYSTEMPATHS
    if "permission denied" in text and facts.in_container and ("mount" in text or "make / slave" in text):
        return APPARMOR
    return None


def _read_int(path: str) -> int | None:
    try:
        return int(Path(path).read_text().strip())
    except (OSError, ValueError):
        return None


def _in_container() -> bool:
    if Path("/.dockerenv").exists() or Path("/run/.containerenv").exists():
        return True
    return os.environ.get("container") is not None  # noqa: SIM112 (lower case: what podman and systemd-nspawn set)


def host_facts() -> HostFacts:
    return HostFacts(
        in_container=_in_container(),
        max_user_namespaces=_read_int("/proc/sys/user/max_user_namespaces"),
        unprivileged_userns_clone=_read_int("/proc/sys/kernel/unprivileged_userns_clone"),
        apparmor_restrict_userns=_read_int("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"),
    )


def explain(error: str) -> str:
    """`error` followed by the setting it says is missing, where one is known: for the worker's refusal."""
    setting = missing_setting(error, host_facts())
    return error if setting is None else f"{error}; missing: {setting}"
