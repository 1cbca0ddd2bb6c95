"""Can this host sandbox a job as issue 34 wants it (a non-root job, the seccomp filter, a read-only
/proc/sys), and if not, which setting says no. `worker/sandbox.py` `probe` starts one sandbox at the
worker's start with the job's own view of the runtime; a failure is explained by `why` (pure), which names
the sysctl, capability or package to change, never only bwrap's last line.

`python -m worker.sandbox_probe` is what that sandbox runs: it switches to the job's ids as a job's first
process does, then checks what a job relies on."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from worker import sandbox_diagnose

# sysctls that forbid a user namespace to a non-root user: (path under /proc/sys, the value that forbids it,
# what to set instead)
USERNS_SYSCTLS = (
    ("user/max_user_namespaces", "0", "a few thousand"),
    ("kernel/unprivileged_userns_clone", "0", "1"),  # Debian's and Ubuntu's older kernels
    ("kernel/apparmor_restrict_unprivileged_userns", "1", "0"),  # Ubuntu 23.10+ (or an AppArmor profile for bwrap)
)


def read_sysctls(root: Path = Path("/proc/sys")) -> dict[str, str]:
    found = {}
    for name, _, _ in USERNS_SYSCTLS:
        try:
            found[name] = (root / name).read_text().strip()
        except OSError:
            continue
    return found


def why(stderr: str, code: int, *, root: bool, sysctls: dict[str, str]) -> str:
    """One line saying what stopped the sandbox and what to change (pure: the caller read the host)."""
    last = (stderr.strip().splitlines() or [f"exit {code}"])[-1]
    if not root:
        for name, forbids, allows in USERNS_SYSCTLS:
            if sysctls.get(name) == forbids:
                dotted = name.replace("/", ".")
                return (
                    f"user namespaces are disabled for non-root users: sysctl {dotted}={forbids} (set it to {allows}, "
                    f"or run the worker as root) [bwrap: {last}]"
                )
    if "seccomp" in stderr.lower():
        why = "the kernel refused the job's filter (CONFIG_SECCOMP_FILTER, or a container's profile)"
        return f"seccomp: {why} [bwrap: {last}]"
    if "switch the job" in stderr:
        return f"the job's first process could not drop to RANKZERO_SANDBOX_UID/GID (CAP_SETUID, CAP_SETGID) [{last}]"
    if "cannot read" in stderr:
        return f"{last} (the job runs as RANKZERO_SANDBOX_UID/GID: make it readable to that user, e.g. chmod -R o+rX)"
    if root and ("Operation not permitted" in stderr or "Permission denied" in stderr):
        return (
            "bwrap cannot make namespaces or mounts as root here: in a container the worker needs CAP_SYS_ADMIN, "
            "CAP_NET_ADMIN, CAP_SETUID, CAP_SETGID and an unconfined AppArmor and /proc (docs/security.md) "
            f"[bwrap: {last}]"
        )
    return f"bwrap cannot create namespaces here ({last})"


CHECK = "import sys; sys.path.insert(0, {repo!r}); from worker.sandbox_probe import inner; sys.exit(inner())"


def inner_command() -> list[str]:
    """What the probe's sandbox runs (`inner`, with the service's code on its path)."""
    return [sys.executable, "-I", "-c", CHECK.format(repo=str(Path(__file__).resolve().parent.parent))]


def run(argv: list[str], seccomp_fd: int, *, root: bool, preexec: Callable[[], None]) -> str | None:
    """Start one sandbox as a job's would be (`argv`: bwrap, its options for the job's view of the runtime, as
    the job's user under the filter, then `inner_command`): a runtime that user cannot read, or a kernel that
    refuses the filter, fails here at the worker's start, not in every job. None: it worked."""
    try:
        done = subprocess.run(argv, capture_output=True, timeout=60, check=False, pass_fds=(seccomp_fd,),
                              preexec_fn=preexec)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap could not run ({exc})"
    if done.returncode != 0:
        stderr = done.stderr.decode(errors="replace")
        # A container's missing option (its seccomp profile, systempaths, AppArmor) first: worker/sandbox_diagnose.py
        last = (stderr.strip().splitlines() or [""])[-1]
        setting = sandbox_diagnose.missing_setting(last, sandbox_diagnose.host_facts())
        if setting is not None:
            return f"bwrap cannot create the job's sandbox here ({last}); missing: {setting}"
        return why(stderr, done.returncode, root=root, sysctls=read_sysctls())
    return None


def inner() -> int:
    """Inside the probe's sandbox: become the job's user, then check the filter and the runtime."""
    from worker import sandbox_ids

    try:
        sandbox_ids.drop_from_env()
    except OSError as exc:
        print(f"could not switch the job to its ids: {exc}", file=sys.stderr)
        return 3
    status = Path("/proc/self/status").read_text()
    if "\nSeccomp:\t2" not in status:
        print("seccomp: the job's filter is not in force (Seccomp: 2 missing)", file=sys.stderr)
        return 4
    for path in (Path(sys.prefix), Path(sys.base_prefix), Path(__file__).resolve().parent):
        try:
            next(iter(path.iterdir()), None)
        except OSError as exc:
            print(f"the job's user cannot read {path} ({exc.strerror})", file=sys.stderr)
            return 5
    try:
        import pyseccomp  # noqa: F401 (a package of the environment: its site-packages is readable)
    except (ImportError, OSError) as exc:
        print(f"the job's user cannot read the Python environment's packages ({exc})", file=sys.stderr)
        return 5
    return 0


if __name__ == "__main__":
    sys.exit(inner())
