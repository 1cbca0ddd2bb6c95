"""The seccomp filter on every process of a job (issue 34): the kernel's attack surface a training job
has no use for, refused with EPERM. bwrap loads it (`--seccomp FD`) in the job's first process, after
its own set-up and before the job's code, and every process the job starts inherits it.

Modelled on Docker's default profile (Kubernetes' RuntimeDefault): what that profile refuses a container
without added capabilities, plus what the issue names beyond it (keyrings, io_uring, bpf,
perf_event_open, userfaultfd, the new mount API, namespaces). It is a list of refusals on top of "allow",
not Docker's list of what is allowed: jobs run any PyTorch, CUDA driver, NCCL or user code, and an
allow-list that misses one syscall a new release uses fails jobs in ways nobody can read from their logs;
the refused calls are ones no training job needs (a profiler's perf_event_open, a debugger's ptrace).

Compiled to BPF by libseccomp (the system's libseccomp2, through pyseccomp's ctypes bindings: the API of
libseccomp's own Python module), once per worker, then handed to bwrap in a sealed memfd.
Syscalls of another ABI (i386's `int 0x80`, x32) are killed: libseccomp's bad-arch action, so no rule
is bypassed through the other table.
"""

from __future__ import annotations

import errno
import os
from functools import lru_cache

# Refused with EPERM, as Docker does (its profile answers EPERM for what it does not allow).
DENIED: dict[str, tuple[str, ...]] = {
    "kernel keyrings (keys outlive the job and are shared per uid)": ("add_key", "keyctl", "request_key"),
    "io_uring (a large, often-exploited kernel surface)": ("io_uring_setup", "io_uring_enter", "io_uring_register"),
    "bpf, perf and userfaultfd (kernel exploitation primitives)": ("bpf", "perf_event_open", "userfaultfd"),
    "kernels and modules": ("kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot"),
    "mounts": (
        "mount",
        "umount2",
        "pivot_root",
        "chroot",
        "fsopen",
        "fsconfig",
        "fsmount",
        "fspick",
        "move_mount",
        "open_tree",
        "mount_setattr",
    ),  # fmt: skip
    "namespaces": ("unshare", "setns"),
    "other processes' memory": ("ptrace", "process_vm_readv", "process_vm_writev"),
    "the host's clock": ("settimeofday", "clock_settime", "clock_adjtime"),
    "host administration": (
        "acct",
        "swapon",
        "swapoff",
        "quotactl",
        "quotactl_fd",
        "syslog",
        "vhangup",
        "lookup_dcookie",
        "nfsservctl",
        "uselib",
        "ustat",
        "sysfs",
        "_sysctl",
        "iopl",
        "ioperm",
        "fanotify_init",
    ),  # fmt: skip
    "file handles (they reach files outside the job's mounts)": ("open_by_handle_at", "name_to_handle_at"),
}
# clone3 passes its flags in memory a filter cannot read: ENOSYS makes glibc fall back to clone, whose
# flags it can (Docker does the same).
ENOSYS = ("clone3",)
# clone with any of these flags would make a namespace: refused (a thread or a fork passes).
CLONE_NEW_FLAGS = {
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
    "CLONE_NEWTIME": 0x00000080,
}


class SeccompUnavailable(OSError):
    """No filter can be built here (libseccomp missing): the worker refuses to sandbox without it."""


def denied_names() -> tuple[str, ...]:
    return tuple(name for names in DENIED.values() for name in names)


@lru_cache(maxsize=1)
def program() -> bytes:
    """The filter as BPF bytes (built once per worker)."""
    try:
        import pyseccomp as sc
    except (ImportError, OSError) as exc:
        raise SeccompUnavailable(
            f"seccomp: libseccomp cannot be loaded ({exc}): install Debian's libseccomp2 (`make sandbox`)"
        ) from exc
    flt = sc.SyscallFilter(sc.ALLOW)
    for name in denied_names():
        if _exists(sc, name):
            flt.add_rule(sc.ERRNO(errno.EPERM), name)
    for name in ENOSYS:
        if _exists(sc, name):
            flt.add_rule(sc.ERRNO(errno.ENOSYS), name)
    for flag in CLONE_NEW_FLAGS.values():
        # x86_64's clone(flags, ...): flags is argument 0 (the same on arm64).
        flt.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    fd = os.memfd_create("rankzero-seccomp-build", os.MFD_CLOEXEC)
    with os.fdopen(fd, "w+b") as out:  # libseccomp writes to the descriptor; read it back from the start
        flt.export_bpf(out)
        out.seek(0)
        return out.read()


def _exists(sc: object, name: str) -> bool:
    """Is `name` a syscall of this architecture (some, like nfsservctl, are gone from x86_64's table)?"""
    try:
        return sc.resolve_syscall(sc.system_arch(), name) >= 0  # type: ignore[attr-defined]
    except (ValueError, OSError):
        return False


def memfd() -> int:
    """A descriptor holding the filter for bwrap's --seccomp (read once from its start; close-on-exec:
    only the bwrap it is passed to gets it)."""
    fd = os.memfd_create("rankzero-seccomp", os.MFD_CLOEXEC)
    try:
        os.write(fd, program())
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd
