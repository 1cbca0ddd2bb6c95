"""Who a job runs as when the worker is root (issue 34): never uid 0.

A non-root worker's bwrap makes a user namespace, and the job runs as the worker's own uid in it, with no
capability. A root worker's job used to run as uid 0 of the host (capabilities dropped, but the kernel
gates sysctl writes, the root-owned files and the root keyring on uid 0 itself). Now it runs as
RANKZERO_SANDBOX_UID:RANKZERO_SANDBOX_GID: bwrap sets up the mounts as root (so the data dir may stay 0700),
keeps only CAP_SETUID/CAP_SETGID for the job's first process (worker/sandbox_guard.py), which switches to
those ids before any of the job's code runs; the switch clears every capability, and no_new_privs (set by
bwrap for the seccomp filter) keeps it so.

Why not bwrap's `--unshare-user --uid N`: bwrap run as root maps the sandbox's uid N to the host's uid 0 (a
non-setuid bwrap maps only its caller), and the kernel's sysctl check is on that host uid. And why not bwrap
run as N: it resolves every bind source as N, and the data dir (0700) and /root are closed to N.

What the job must reach then: its run dir is made the job uid's (`share_run_dir`, every attempt: the
worker wrote its spec and log folders as root); its bundle, its environment and the built-in data sets are
given read access for the job's group (`share_read_only`, group only: other local users still get nothing).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import stat
from pathlib import Path

RUN_AS_ENV = "RANKZERO_SANDBOX_RUN_AS"  # "uid:gid[:group,...]", read and removed by the job's first process
# The job's working folder, entered by its first process once it runs as the job's uid (`drop_from_env`), not by
# bwrap: bwrap enters it after dropping its capabilities, still as uid 0, and uid 0 without CAP_DAC_OVERRIDE is
# refused a run dir that belongs to the job's uid with mode 0700 (a worker whose umask is 077 makes it so).
CWD_ENV = "RANKZERO_SANDBOX_CWD"
JOB_UMASK = 0o077  # the job's files stay private to it, as they were under the worker's own umask
PR_SET_DUMPABLE = 4


def group_readable(mode: int) -> int:
    """The mode that lets the owning group read (and enter, for a folder or an executable) what the owner can;
    never write."""
    add = stat.S_IRGRP if mode & stat.S_IRUSR else 0
    if mode & stat.S_IXUSR or stat.S_ISDIR(mode):
        add |= stat.S_IXGRP
    return stat.S_IMODE(mode) | add


def share_run_dir(run_dir: Path, uid: int, gid: int) -> int:
    """Make the run dir and everything below it uid:gid's, following no link (the job may have left links
    there: a link is changed itself, never its target). Returns how many entries changed."""
    changed = 0
    root = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        changed += _own(root, None, uid, gid)
        for _, dirs, files, dir_fd in os.fwalk(dir_fd=root, follow_symlinks=False):
            for name in (*dirs, *files):
                changed += _own(dir_fd, name, uid, gid)
    finally:
        os.close(root)
    return changed


def _own(dir_fd: int, name: str | None, uid: int, gid: int) -> int:
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False) if name else os.fstat(dir_fd)
    if (st.st_uid, st.st_gid) == (uid, gid):
        return 0
    with contextlib.suppress(FileNotFoundError):  # the worker's own files come and go
        if name is None:
            os.fchown(dir_fd, uid, gid)
        else:
            os.chown(name, uid, gid, dir_fd=dir_fd, follow_symlinks=False)
    return 1


def share_read_only(tree: Path, gid: int) -> int:
    """Give group `gid` read access to `tree` (a folder or a file) and what it holds, following no link; the
    owner stays (root: the job can change none of it, and it is mounted read-only besides). Returns how many
    entries changed."""
    changed = 0
    if tree.is_symlink() or not tree.exists():
        return 0
    if not tree.is_dir():
        fd = os.open(tree, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            return _share(fd, None, gid)
        finally:
            os.close(fd)
    root = os.open(tree, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        changed += _share(root, None, gid)
        for _, dirs, files, dir_fd in os.fwalk(dir_fd=root, follow_symlinks=False):
            for name in (*dirs, *files):
                changed += _share(dir_fd, name, gid)
    finally:
        os.close(root)
    return changed


def _share(dir_fd: int, name: str | None, gid: int) -> int:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False) if name else os.fstat(dir_fd)
    except FileNotFoundError:
        return 0
    if stat.S_ISLNK(st.st_mode):
        return 0
    mode = group_readable(st.st_mode)
    if st.st_gid == gid and stat.S_IMODE(st.st_mode) == mode:
        return 0
    with contextlib.suppress(FileNotFoundError):
        if name is None:
            os.fchown(dir_fd, -1, gid)
            os.fchmod(dir_fd, mode)  # after the chown: a chown clears setgid/setuid bits
        else:
            os.chown(name, -1, gid, dir_fd=dir_fd, follow_symlinks=False)
            os.chmod(name, mode, dir_fd=dir_fd)  # not a link (checked above); a swap to one here is the worker's own
    return 1


# Trees that do not change once made (an unpacked bundle, a built environment): shared with the job's group
# once per worker, keyed by the folder's identity. The data sets folder is walked every attempt (the worker's
# downloads add to it).
_shared_once: set[tuple[int, int, int]] = set()


def share_for_attempt(
    run_dir: Path,
    made_once: tuple[Path | None, ...],
    datasets_dir: Path | None,
    input_fds: tuple[tuple[int, Path], ...],
    uid: int,
    gid: int,
) -> None:
    """Before a root worker's attempt: its run dir becomes uid:gid's, what it reads gets group read."""
    share_run_dir(run_dir, uid, gid)
    for tree in made_once:
        if tree is None:
            continue
        st = tree.stat()
        key = (st.st_dev, st.st_ino, st.st_mtime_ns)
        if key not in _shared_once:
            share_read_only(tree, gid)
            _shared_once.add(key)
    if datasets_dir is not None:
        share_read_only(datasets_dir, gid)
    for fd, _ in input_fds:
        share_input(fd, gid)


def share_input(fd: int, gid: int) -> None:
    """An input file from another run (the checkpoint a job resumes from), by its open descriptor."""
    st = os.fstat(fd)
    if st.st_gid != gid or stat.S_IMODE(st.st_mode) != group_readable(st.st_mode):
        os.fchown(fd, -1, gid)
        os.fchmod(fd, group_readable(st.st_mode))


def device_groups(devices: tuple[Path, ...]) -> tuple[int, ...]:
    """The groups the job needs for its GPU device nodes: a node not read-writable by all (the NVIDIA driver's
    NVreg_DeviceFileMode=0660, group `video`) gives its group, never group 0 (root's group owns other files)."""
    found: set[int] = set()
    for dev in devices:
        with contextlib.suppress(OSError):
            st = dev.stat()
            if st.st_mode & 0o006 != 0o006 and st.st_gid != 0:
                found.add(st.st_gid)
    return tuple(sorted(found))


def run_as_value(uid: int, gid: int, groups: tuple[int, ...] = ()) -> str:
    return f"{uid}:{gid}" + (":" + ",".join(map(str, groups)) if groups else "")


def parse_run_as(value: str) -> tuple[int, int, tuple[int, ...]]:
    uid, gid, *rest = value.split(":")
    ids = int(uid), int(gid)
    groups = tuple(int(g) for g in rest[0].split(",")) if rest and rest[0] else ()
    if min((*ids, *groups)) <= 0 or len(rest) > 1:
        raise ValueError(f"{RUN_AS_ENV}={value!r}: a job never runs as uid or gid 0")
    return (*ids, groups)


def drop_from_env() -> None:
    """In the job's first process, before any of the job's code: become RUN_AS_ENV's uid:gid (set by the
    sandbox for a root worker; absent for a non-root one, whose user namespace already did it). Raises
    PermissionError when the switch did not happen: the job must never go on as root."""
    os.umask(JOB_UMASK)  # bwrap ran with 022 to make its mount points reachable (worker/sandbox.py)
    value = os.environ.pop(RUN_AS_ENV, None)
    if value is None:
        return
    uid, gid, groups = parse_run_as(value)
    os.setgroups(list(groups))
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)  # from uid 0 to non-zero: the kernel clears every capability
    # A process whose ids changed is not dumpable: its /proc files would stay root's, and the job's own
    # tools (torch's, psutil's) read them. Dumpable again: it is the job's process from here on.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid) or _effective_caps() != 0:
        raise PermissionError(f"the sandbox could not switch the job to uid {uid}, gid {gid} without capabilities")
    cwd = os.environ.pop(CWD_ENV, None)
    if cwd is not None:
        os.chdir(cwd)


def _effective_caps() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0
