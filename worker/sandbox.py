"""A job is a sandbox: every attempt's processes run under bubblewrap (Debian's `bwrap`) in their own
mount, pid, IPC and UTS namespaces (and a user namespace where the worker is not root), with every
capability dropped, and in one cgroup (worker/sandbox_cgroup.py). docs/security.md "The job sandbox".
Issue 34: never as uid 0 (a root worker's job switches to RANKZERO_SANDBOX_UID/GID: worker/sandbox_ids.py),
under a seccomp filter (worker/sandbox_seccomp.py), with /proc/sys and its own root read-only, within a memory
limit that its /tmp and /dev/shm count against (worker/sandbox_limits.py), and on a run dir filesystem of its
disk limit's size where the host allows one (worker/sandbox_disk.py).

What an attempt sees (`View`, turned into bwrap's arguments by the pure `bwrap_args`):
- read-only: the system dirs (/usr, /etc, ...), the Python environment and the service's code, the
  job's own unpacked bundle, the datasets dir and the extra data set roots (a built-in data set's
  download is the worker's, before the ranks start: worker/launch.py `prefetch_data`), so no job can
  change the data another job reads;
- read-write: its own run dir, a private /tmp (also $HOME) and /dev/shm;
- nothing else: not the data dir (the token file, the SQLite database), not the runs dir (other
  jobs' run dirs, the bundle store), not the bundle cache; a /proc of its own pid namespace only (the
  worker's environ, its pid: out of sight and out of reach of signals and ptrace).
A single-node attempt also gets a network namespace with loopback only: no port it opens (the rendezvous store,
gloo, NCCL's bootstrap, a listener of the script's) is reachable from outside; a multi-node one, the host's.

How it ends: the job's first process (worker/sandbox_guard.py, torchrun's parent) is the init of its pid
namespace (--as-pid-1), so when it exits (torchrun exited, or it was killed) the kernel kills every process of
the namespace, escaped or not; `end(mark)` then kills whatever is left in the attempt's cgroup and removes it.
The worker's death reaches the job through a pipe (worker/sandbox_guard.py), not the parent-death signal.
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

from core.settings import Settings
from worker import sandbox_cgroup, sandbox_disk, sandbox_ids, sandbox_limits, sandbox_probe, sandbox_seccomp

log = logging.getLogger(__name__)

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")
SANDBOX_TMP = "/tmp"  # private tmpfs; also the ranks' $HOME (the real one is not in the view)
SANDBOX_SHM = "/dev/shm"  # private tmpfs (POSIX shared memory, torch's DataLoader workers)
# /proc files a job has no business with: covered by /dev/null where this kernel has them (issue 34).
# /proc/sys is made read-only as a whole (bwrap's own cover skips it: the folder itself is never writable).
PROC_MASKED = ("/proc/kcore", "/proc/sysrq-trigger", "/proc/timer_list", "/proc/keys", "/proc/key-users")
# Secrets of the host inside the system dirs shown read-only: masked (a file by /dev/null, a folder by an empty
# tmpfs). Before issue 34 a root worker ran its jobs as uid 0 without capabilities, and uid 0 owns these
# files: a job read /etc/shadow, and would have read the systemd unit's settings (/etc/rankzero/env: the token
# and database URL). Its jobs now run as RANKZERO_SANDBOX_UID; the masks stay (a second wall).
SECRET_SYSTEM_PATHS = (
    "/etc/rankzero",
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/ssl/private",
    "/etc/sudoers",
    "/etc/sudoers.d",
)
SECRET_SYSTEM_GLOBS = ("/etc/ssh/ssh_host_*key",)
NOT_ISOLATED = (
    "this job is not isolated: the worker runs with RANKZERO_SANDBOX=off, so the job's code can read the "
    "worker's files and secrets and reach its ports (docs/security.md)"
)
HOW_TO_ENABLE = (
    "install bubblewrap (`apt-get install bubblewrap`, `make sandbox`); in a container give the worker "
    "the capabilities docs/security.md names (docker-compose.yml does); or, knowing that jobs then run "
    "unisolated as the worker itself, set RANKZERO_SANDBOX=off"
)


class SandboxUnavailable(OSError):
    """The host allows no sandbox and RANKZERO_SANDBOX is not off: the worker refuses to start (and a
    launch fails saying so; an OSError, as any other launch that could not start)."""


@dataclass(frozen=True)
class View:
    """What one attempt's processes see of the host's filesystem and network."""

    run_dir: Path  # read-write
    cwd: Path
    code_dir: Path | None = None  # read-only (the job's unpacked bundle)
    datasets_dir: Path | None = None  # read-only (the worker downloads built-in sets first: launch.prefetch_data)
    dataset_roots: tuple[Path, ...] = ()  # read-only
    runtime_dirs: tuple[Path, ...] = ()  # read-only: the Python environment, the service's code
    hidden: tuple[Path, ...] = ()  # masked wherever a read-only bind would show them (data dir, runs dir)
    inputs: tuple[Path, ...] = ()  # read-only files from outside its run dir (the checkpoint it resumes from)
    # The same, as descriptors opened with no link followed (core/run_files.py): bound by descriptor, so
    # another job cannot swap a folder of the path for a link between the worker's check and bwrap's mount.
    input_fds: tuple[tuple[int, Path], ...] = ()
    environment_dir: Path | None = None  # read-only: the job's own packages (worker/environments/, a shared cache)
    host_network: bool = False  # False: a network namespace with loopback only
    devices: tuple[Path, ...] = ()  # GPU device nodes
    as_root: bool = True  # False: a user namespace too
    # Issue 34: (uid, gid) a root worker's job switches to in its first process (worker/sandbox_ids.py); None:
    # a non-root worker's job, its own uid in a user namespace of its own. Set by `prepare`.
    run_as: tuple[int, int] | None = None
    tmp_bytes: int | None = None  # the size of /tmp and of /dev/shm (None: the kernel's default, half the RAM)
    proc_masked: tuple[str, ...] = ()  # PROC_MASKED files this host has
    system: tuple[tuple[str, str | None], ...] = field(default=())  # (path, symlink target or None)
    masked: tuple[tuple[str, bool], ...] = ()  # (path, is a folder): host secrets in the system dirs, hidden


def _under(path: Path, base: Path) -> bool:
    return path == base or base in path.parents


def bwrap_args(view: View) -> list[str]:
    """bwrap's options for `view` (pure: the caller found the system dirs, devices and paths)."""
    # A root worker's job enters its folder once it is the job's uid (sandbox_ids.CWD_ENV), bwrap only "/".
    return [*_namespace_args(view), *_mount_args(view), "--chdir", "/" if view.run_as else str(view.cwd)]


def _namespace_args(view: View) -> list[str]:
    # --as-pid-1: the job's first process (worker/sandbox_guard.py) is the pid namespace's init, so its
    # exit makes the kernel kill every process left in the namespace. Not --die-with-parent: that also
    # SIGKILLs bwrap when the worker dies, where the ranks should get one SIGTERM and checkpoint.
    args = ["--as-pid-1", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if not view.host_network:
        args.append("--unshare-net")
    if not view.as_root:
        args.append("--unshare-user")
    args += ["--cap-drop", "ALL"]
    if view.run_as is not None:  # for the job's first process to switch ids; the switch clears them
        run_as = sandbox_ids.run_as_value(*view.run_as, sandbox_ids.device_groups(view.devices))
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--setenv", sandbox_ids.RUN_AS_ENV, run_as,
                 "--setenv", sandbox_ids.CWD_ENV, str(view.cwd)]  # fmt: skip
    return args


def _bind(flag: str, source: str, dest: str) -> list[str]:
    """A bind whose parent folders bwrap makes 0755 (`--dir`): without it Debian's bwrap 0.8 makes them 0700,
    closed to a job that is not root (it could not reach /root/.pyenv's interpreter)."""
    parent = str(Path(dest).parent)
    return (["--dir", parent] if parent != "/" else []) + [flag, source, dest]


def _mount_args(view: View) -> list[str]:
    """Order matters: bwrap mounts in order, so the masks come after the read-only binds they cover and
    the job's own dirs after the masks (their mount points are then made in the mask's tmpfs)."""
    args: list[str] = []
    shown: list[Path] = []
    for path, target in view.system:
        args += ["--symlink", target, path] if target is not None else ["--ro-bind", path, path]
        shown += [Path(path)] if target is None else []
    for path, is_dir in view.masked:
        args += ["--tmpfs", path] if is_dir else ["--ro-bind", "/dev/null", path]
    args += ["--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys"]
    args += [a for f in view.proc_masked for a in ("--ro-bind", "/dev/null", f)]
    args += ["--dev", "/dev", "--ro-bind", "/sys", "/sys"]
    size = ["--size", str(view.tmp_bytes)] if view.tmp_bytes is not None else []
    for tmp in (SANDBOX_TMP, SANDBOX_SHM):  # sticky and world-writable, as a /tmp is: the job is not root
        args += ["--perms", "1777", *size, "--tmpfs", tmp]
    for d in view.runtime_dirs:
        args += _bind("--ro-bind", str(d), str(d))
        shown.append(d)
    args += [a for h in view.hidden if any(_under(h, s) for s in shown) for a in ("--tmpfs", str(h))]
    args += [a for dev in view.devices for a in ("--dev-bind", str(dev), str(dev))]
    if view.datasets_dir is not None:
        args += _bind("--ro-bind", str(view.datasets_dir), str(view.datasets_dir))
    args += [a for root in view.dataset_roots for a in _bind("--ro-bind-try", str(root), str(root))]
    if view.code_dir is not None:
        args += _bind("--ro-bind", str(view.code_dir), str(view.code_dir))
    args += [a for f in view.inputs for a in _bind("--ro-bind", str(f), str(f))]
    args += [a for fd, f in view.input_fds for a in _bind("--ro-bind-fd", str(fd), str(f))]
    if view.environment_dir is not None:  # after the masks: it lies in the (hidden) data dir
        args += _bind("--ro-bind", str(view.environment_dir), str(view.environment_dir))
    args += _bind("--bind", str(view.run_dir), str(view.run_dir))
    return [*args, "--remount-ro", "/"]  # the sandbox's own root: nothing to write there


def proc_masked(names: Iterable[str] = PROC_MASKED) -> tuple[str, ...]:
    """The PROC_MASKED files this kernel has (bwrap cannot cover one that is missing)."""
    return tuple(n for n in names if os.path.exists(n))


def system_dirs(names: Iterable[str] = SYSTEM_DIRS) -> tuple[tuple[str, str | None], ...]:
    """The system dirs this host has: a symlink (`/bin -> usr/bin`) is made as one, a dir bound read-only."""
    found: list[tuple[str, str | None]] = []
    for name in names:
        p = Path(name)
        if p.is_symlink():
            found.append((name, os.readlink(p)))
        elif p.is_dir():
            found.append((name, None))
    return tuple(found)


def secret_paths(
    names: Iterable[str] = SECRET_SYSTEM_PATHS, globs: Iterable[str] = SECRET_SYSTEM_GLOBS
) -> tuple[tuple[str, bool], ...]:
    """The host's secrets (SECRET_SYSTEM_PATHS, SECRET_SYSTEM_GLOBS) that exist here, each with whether it is a
    folder; a link is left alone (its target, if a secret, is one of the names)."""
    found = [Path(n) for n in names] + [p for g in globs for p in sorted(Path("/").glob(g.lstrip("/")))]
    return tuple((str(p), p.is_dir()) for p in found if p.exists() and not p.is_symlink())


def gpu_devices() -> tuple[Path, ...]:
    return tuple(sorted(Path("/dev").glob("nvidia*")))


def _minimal(paths: Iterable[Path]) -> tuple[Path, ...]:
    """The paths without those inside another one (one bind covers them)."""
    unique = sorted({p for p in paths if p.exists()}, key=lambda p: len(p.parts))
    kept: list[Path] = []
    for p in unique:
        if not any(_under(p, k) for k in kept):
            kept.append(p)
    return tuple(kept)


def runtime_dirs(pythonpath: str) -> tuple[Path, ...]:
    """The Python environment (venv, its base interpreter), the service's code (trainer, rankzero, the
    worker's sandbox guard) and the PYTHONPATH entries the ranks get, each resolved: read-only."""
    repo = Path(__file__).resolve().parent.parent
    candidates = [
        Path(sys.prefix),
        Path(sys.base_prefix),
        Path(sys.executable).resolve().parent.parent,
        repo,
        *(Path(p) for p in pythonpath.split(os.pathsep) if p),
    ]
    resolved = [p.resolve() for p in candidates] + [p.absolute() for p in candidates]
    return _minimal(p for p in resolved if not any(_under(p, Path(s)) for s in ("/usr", "/etc")))


# --- is there a sandbox here? --------------------------------------------------------------------


@lru_cache(maxsize=1)
def probe() -> str | None:
    """None when this host can sandbox jobs; else one line saying why not."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap (bwrap) is not installed"
    root = os.geteuid() == 0
    try:
        seccomp_fd = sandbox_seccomp.memfd()
    except OSError as exc:
        return str(exc)
    settings = _settings()
    view = View(run_dir=Path("/tmp"), cwd=Path("/"), system=system_dirs(), as_root=root,
                runtime_dirs=runtime_dirs(""), proc_masked=proc_masked(),
                run_as=(settings.sandbox_uid, settings.sandbox_gid) if root else None)  # fmt: skip
    argv = [bwrap, "--seccomp", str(seccomp_fd), *bwrap_args(view), *sandbox_probe.inner_command()]
    try:
        return sandbox_probe.run(argv, seccomp_fd, root=root, preexec=bwrap_umask)
    finally:
        os.close(seccomp_fd)


def bwrap_umask() -> None:
    # bwrap makes its mount points with the caller's umask: the worker's 077 would close them to a non-root job.
    os.umask(0o022)


@lru_cache(maxsize=1)
def cgroups() -> sandbox_cgroup.Layout | None:
    return sandbox_cgroup.detect()


def require() -> None:
    """Raise SandboxUnavailable, saying what to do, when this host cannot sandbox a job."""
    why = probe()
    if why is not None:
        raise SandboxUnavailable(f"the worker cannot sandbox jobs: {why}. To fix: {HOW_TO_ENABLE}")


def check_host(sandbox_setting: str) -> str | None:
    """At worker start: raise SandboxUnavailable when jobs cannot be sandboxed and the setting is not
    'off'; return the warning to log when it is off (None: sandboxed)."""
    if sandbox_setting == "off":
        return NOT_ISOLATED
    require()
    if cgroups() is None:
        log.warning("no writable cgroup (v1 memory+pids, or v2) for job cgroups: jobs run in namespaces, but their "
                    "memory limit is enforced by the worker's sampling only and no pids limit applies")  # fmt: skip
    return None


# --- one attempt --------------------------------------------------------------------------------


@dataclass
class Prepared:
    """An attempt's sandbox before its launch: the cgroup made, the pipe whose end tells of the worker's death."""

    mark: str
    argv_prefix: list[str]
    cgroup: sandbox_cgroup.AttemptCgroup | None
    watch_read: int
    watch_write: int
    extra_fds: tuple[int, ...] = ()  # the seccomp filter's memfd: passed to bwrap, closed here once it started
    memory_limit_mb: int | None = None  # what the attempt's cgroup and tmpfs sizes hold it to
    file_size_limit: int = resource.RLIM_INFINITY  # RLIMIT_FSIZE of every process of the job
    disk: sandbox_disk.DiskLimit = field(default_factory=sandbox_disk.DiskLimit)  # how its disk limit holds

    @property
    def pass_fds(self) -> tuple[int, ...]:
        """The descriptors bwrap must get (Popen's pass_fds): the guard's pipe end, the seccomp filter."""
        return (self.watch_read, *self.extra_fds)

    def command(self, inner: Sequence[str]) -> list[str]:
        return [*self.argv_prefix, "--", *inner]

    def preexec(self) -> Callable[[], None]:
        cgroup, fsize = self.cgroup, self.file_size_limit

        def run_in_child() -> None:
            # bwrap's processes ignore the SIGTERM a cancel sends the group (bwrap would die of it and report no
            # exit code); the guard inside gives torchrun the default action back.
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            if cgroup is not None:
                cgroup.join_self()
            bwrap_umask()
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

        return run_in_child

    def started(self, proc: subprocess.Popen[bytes] | None) -> None:
        """After the spawn: the worker keeps only the write end (its death closes it), and a thread ends the
        sandbox when bwrap exits, whoever stops the attempt and however (`end`)."""
        for fd in (self.watch_read, *self.extra_fds):
            with contextlib.suppress(OSError):
                os.close(fd)
        with _lock:
            _live[self.mark] = self
        if proc is not None:
            threading.Thread(target=_end_when_exited, args=(proc, self.mark), daemon=True,
                             name=f"sandbox-{self.mark[:24]}").start()  # fmt: skip


def _end_when_exited(proc: subprocess.Popen[bytes], mark: str) -> None:
    # Popen.wait here and the supervisor's poll() share Popen's waitpid lock: poll() reads None until this
    # wait has reaped bwrap, then the same exit code.
    proc.wait()
    end(mark)


_live: dict[str, Prepared] = {}
_ended_ooms: dict[str, int] = {}  # ended attempts the kernel killed processes of: mark -> how many
MAX_ENDED_REMEMBERED = 1000
_lock = threading.Lock()


def prepare(  # noqa: PLR0913 (keyword-only: the disk limit, whether the attempt spans hosts)
    view: View,
    mark: str,
    memory_limit_mb: int | None,
    pids_max: int,
    *,
    settings: Settings | None = None,
    disk_limit_mb: int | None = None,
    several_nodes: bool = False,
    own_disk_limit: bool = True,
) -> Prepared:
    """The attempt's sandbox: its memory limit (within RANKZERO_JOB_MEMORY_FRACTION of the host), cgroup, seccomp
    filter, a root worker's job ids, and a filesystem of its disk limit where the spec sets its own (own_disk_limit)."""
    require()
    settings = settings if settings is not None else _settings()
    bwrap = shutil.which("bwrap") or "bwrap"
    memory = sandbox_limits.memory_mb(memory_limit_mb, sandbox_limits.host_memory_mb(), settings.job_memory_fraction)
    if memory.note:
        log.warning("attempt %s: %s", mark, memory.note)
    run_as = (settings.sandbox_uid, settings.sandbox_gid) if view.as_root else None
    if run_as is not None:
        shared = (view.code_dir, view.environment_dir)
        sandbox_ids.share_for_attempt(view.run_dir, shared, view.datasets_dir, view.input_fds, *run_as)
    view = replace(view, run_as=run_as, tmp_bytes=sandbox_limits.tmpfs_bytes(memory.limit_mb),
                   proc_masked=proc_masked())  # fmt: skip
    seccomp_fd = sandbox_seccomp.memfd()
    layout = cgroups()
    cgroup = None
    try:
        if layout is not None:
            sandbox_cgroup.sweep(layout)
            cgroup = sandbox_cgroup.create(layout, mark, memory.limit_mb, pids_max)
    except BaseException:
        os.close(seccomp_fd)
        raise
    read, write = os.pipe()  # both close-on-exec: only the sandbox (pass_fds) gets the read end
    argv = [bwrap, "--seccomp", str(seccomp_fd), *bwrap_args(view)]
    runs_dir = settings.resolved_runs_dir
    disk = sandbox_disk.for_attempt(view.run_dir, runs_dir, mark, disk_limit_mb, several_nodes, own_disk_limit)
    fsize = sandbox_limits.file_size_limit(None if disk.mounted else disk_limit_mb)  # a filesystem's ENOSPC instead
    return Prepared(mark, argv, cgroup, read, write, (seccomp_fd,), memory.limit_mb, fsize, disk)


def _settings() -> Settings:
    from core.settings import get_settings

    return get_settings()


@dataclass(frozen=True)
class Ended:
    """What the sandbox saw of the attempt at its end."""

    killed: int  # processes still alive at the end and killed (escapees, a hung rank)
    oom_kills: int  # processes the kernel killed at the memory limit


def end(mark: str) -> Ended | None:
    """At attempt end (success, failure, cancel, drain, preemption): kill every process left in the
    attempt's cgroup, remove it, close the worker's end of the guard's pipe. Idempotent; None for an
    attempt launched without a sandbox."""
    with _lock:
        prepared = _live.pop(mark, None)
    if prepared is None:
        return None
    killed, ooms = 0, 0
    if prepared.cgroup is not None:
        killed = len(prepared.cgroup.kill_all())
        ooms = prepared.cgroup.oom_kills()
        prepared.cgroup.remove()
    prepared.disk.release(mark)  # its processes are gone: the run dir's files back underneath
    with contextlib.suppress(OSError):
        os.close(prepared.watch_write)
    if ooms:  # the supervisor asks after the sandbox has ended (its failure then names the kernel's kills)
        with _lock:
            _ended_ooms[mark] = ooms
            while len(_ended_ooms) > MAX_ENDED_REMEMBERED:
                _ended_ooms.pop(next(iter(_ended_ooms)))
    if killed:
        log.info("attempt %s: %d process(es) left in its sandbox were killed at its end", mark, killed)
    return Ended(killed=killed, oom_kills=ooms)


def cgroup_pids(mark: str) -> list[int] | None:
    """A live attempt's processes as its cgroup lists them (escapees included; one small file read), or None
    for an attempt without a cgroup on this host (launched unsandboxed, or the host has no writable cgroup)."""
    prepared = _live.get(mark)
    return prepared.cgroup.pids() if prepared is not None and prepared.cgroup is not None else None


def oom_kills(mark: str) -> int:
    """How many of an attempt's processes the kernel killed at its memory limit (so far, or in all once ended)."""
    prepared = _live.get(mark)
    if prepared is not None and prepared.cgroup is not None:
        return prepared.cgroup.oom_kills()
    return _ended_ooms.get(mark, 0)
