"""A disk limit the filesystem enforces (issue 34 part 3): a root worker gives each single-node attempt of a job with
a disk limit a filesystem of that size, so a write past it fails inside the job with ENOSPC, at once.

How: an ext4 image (a sparse file in `<runs dir>/.disks/`, on the runs dir's own disk) is made for the attempt, the
run dir's contents are copied into it (the checkpoints an exact resume reads, the logs of earlier attempts), and it
is mounted over the run dir on the host, where the worker's ingest, the API and bwrap's bind all find it under the
same path as before. At the attempt's end its contents are copied back into the run dir underneath (reached through
a descriptor opened before the mount), then the image is unmounted and deleted: the view at the run dir's path is
complete before, during and after the switch, and the next attempt starts from what this one left. The copies
(worker/sandbox_disk_copy.py) are sparse-aware and keep hard links: what lands on the host's disk is at most what
the image held, whatever the job made of its files.

Where it cannot be done the worker's sampled check (worker/quota.py, once per heartbeat, with RLIMIT_FSIZE at twice
the limit: worker/sandbox_limits.py) is the limit, and the worker says so (`decide` gives the words): a non-root
worker cannot mount; a host without loop devices (a container without /dev/loop-control) or without mkfs.ext4
cannot make the filesystem; a multi-node attempt's other hosts write to the shared run dir directly."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from worker import sandbox_disk_copy

log = logging.getLogger(__name__)

MIB = 2**20
DISKS_DIR = ".disks"  # in the runs dir (hidden from every job, as the whole runs dir is)
MOUNT_OPTIONS = "loop,nosuid,nodev"
# No reserved blocks (the job is the only user); 4 KiB blocks and an inode per 16 KiB whatever the size (mke2fs's
# "small" type would spend 6 % of a small image on inodes); the inode tables and journal written lazily, so a
# large sparse image costs no more to make than a small one.
MKFS = ("mkfs.ext4", "-q", "-F", "-m", "0", "-b", "4096", "-i", "16384", "-E",
        "lazy_itable_init=1,lazy_journal_init=1,nodiscard")  # fmt: skip
FILESYSTEM = "filesystem"
SAMPLED = "sampled"


@dataclass(frozen=True)
class DiskMode:
    """How an attempt's disk limit holds: `FILESYSTEM` (ENOSPC at the limit) or `SAMPLED` (the worker's check)."""

    mode: str
    why: str  # the words the worker's log and the job's timeline show


def decide(
    limit_mb: int | None, *, root: bool, several_nodes: bool, loop_devices: bool, mkfs: bool, own_limit: bool = True
) -> DiskMode | None:
    """Pure: how the limit holds for an attempt (None: the job has no disk limit). Only a limit the job's spec
    sets gets a filesystem: the server's default (RANKZERO_JOB_DISK_LIMIT_MB) is a backstop for every job, and a
    filesystem per attempt costs a copy of the run dir in and out (docs/security.md)."""
    if limit_mb is None:
        return None
    reason = (
        "the job's spec sets no disk_limit_mb of its own (the server's default is checked, not a filesystem)"
        if not own_limit
        else "the worker is not root, so it cannot mount a filesystem for the job"
        if not root
        else "the job spans several hosts, which write to its run dir directly"
        if several_nodes
        else "this host has no loop devices (/dev/loop-control)"
        if not loop_devices
        else "mkfs.ext4 is not installed (apt-get install e2fsprogs)"
        if not mkfs
        else None
    )
    if reason is not None:
        return _sampled(limit_mb, reason)
    return DiskMode(FILESYSTEM, f"disk_limit_mb {limit_mb:,} MiB enforced by a filesystem of that size (ENOSPC)")


def journal_mb(limit_mb: int) -> int:
    return 4 if limit_mb < 1024 else 32


def image_bytes(limit_mb: int) -> int:
    """The image's size: the limit plus ext4's own (inode tables 1.6 %, group metadata, the journal), so that its
    free space is the limit or a little more (measured: tests/security/test_sandbox_disk.py)."""
    return (limit_mb + limit_mb // 40 + journal_mb(limit_mb) + 10) * MIB


def host_can_mount() -> tuple[bool, bool]:
    """(loop devices, mkfs.ext4) on this host."""
    return os.path.exists("/dev/loop-control"), shutil.which(MKFS[0]) is not None


# --- one attempt's filesystem ------------------------------------------------------------------------------------


class DiskFailed(OSError):
    """The attempt's filesystem could not be made or mounted (the attempt falls back to the sampled check)."""


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    if done.returncode != 0:
        raise DiskFailed(f"{' '.join(argv[:2])} failed: {(done.stderr or done.stdout).strip()[-400:]}")


@dataclass
class AttemptDisk:
    """A mounted image over a run dir; `under_fd`: the run dir underneath, opened before the mount."""

    run_dir: Path
    image: Path
    under_fd: int

    @classmethod
    def mount(cls, run_dir: Path, runs_dir: Path, mark: str, limit_mb: int) -> AttemptDisk:
        """Make the image, copy the run dir into it and mount it over the run dir. Raises DiskFailed (nothing left
        behind) when any step fails."""
        disks = runs_dir / DISKS_DIR
        disks.mkdir(mode=0o700, exist_ok=True)
        image, staging = disks / f"{os.getpid()}-{mark}.img", disks / f"{os.getpid()}-{mark}.mnt"
        under_fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        mounted_staging = False
        try:
            with open(image, "xb") as fh:
                fh.truncate(image_bytes(limit_mb))
            _run([*MKFS, "-J", f"size={journal_mb(limit_mb)}", str(image)])
            staging.mkdir(mode=0o700)
            _run(["mount", "-t", "ext4", "-o", MOUNT_OPTIONS, str(image), str(staging)])
            mounted_staging = True
            (staging / "lost+found").rmdir()  # the job's run dir has none
            top = os.open(staging, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            try:
                sandbox_disk_copy.mirror(under_fd, top)
            except (OSError, RecursionError) as exc:
                raise DiskFailed(f"copying the run dir into its filesystem failed: {exc}") from exc
            finally:
                os.close(top)
            # A second view of the same filesystem at the run dir; the loop device is freed when the last goes.
            _run(["mount", "--bind", str(staging), str(run_dir)])
        except BaseException:
            os.close(under_fd)
            if mounted_staging:
                subprocess.run(["umount", str(staging)], capture_output=True, check=False)
            image.unlink(missing_ok=True)
            raise
        finally:
            with contextlib.suppress(OSError):
                if mounted_staging:
                    subprocess.run(["umount", str(staging)], capture_output=True, check=False)
                staging.rmdir()
        return cls(run_dir, image, under_fd)

    def unmount(self) -> None:
        """At the attempt's end (its processes gone): its files copied back to the run dir underneath, then the
        filesystem unmounted (lazily: the worker may still hold a file of it open) and its image deleted. A copy
        that fails leaves the filesystem mounted (the files stay in view) and raises."""
        top = os.open(self.run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            sandbox_disk_copy.mirror(top, self.under_fd)
        finally:
            os.close(top)
        _run(["umount", "--lazy", str(self.run_dir)])
        os.close(self.under_fd)
        self.image.unlink(missing_ok=True)


@dataclass
class DiskLimit:
    """An attempt's disk limit: how it holds (None: the job has none) and its filesystem where it has one."""

    mode: DiskMode | None = None
    mounted: AttemptDisk | None = None

    def release(self, mark: str) -> None:
        """At the attempt's end: its files back in the run dir, its filesystem gone (a failure is logged: the
        files stay in view on the mounted filesystem)."""
        disk, self.mounted = self.mounted, None
        if disk is None:
            return
        try:
            disk.unmount()
        except Exception:  # an OSError, or a tree too deep to copy (RecursionError): left in view, said
            log.exception("attempt %s: its files could not be copied out of its filesystem %s (left mounted at %s)",
                          mark, disk.image, disk.run_dir)  # fmt: skip
        finally:
            with _released:
                _mounted.pop(mark, None)
                _released.notify_all()


# The attempts whose filesystem is mounted (mark -> run dir): `wait_released` waits for the thread that ends one
# (worker/sandbox.py ends an attempt in a thread of its own when bwrap exits) to have copied its files out, and
# the job's next attempt waits for it before it mounts its own (else the first's unmount would take the second's).
_mounted: dict[str, Path] = {}
_released = threading.Condition()
RELEASE_WAIT_S = 600.0


def wait_released(mark: str, timeout_s: float) -> bool:
    """Wait until attempt `mark` has no filesystem mounted (its files are back underneath); False at the timeout."""
    with _released:
        return _released.wait_for(lambda: mark not in _mounted, timeout=timeout_s)


def _wait_run_dir_free(run_dir: Path, runs_dir: Path, timeout_s: float) -> str | None:
    """Wait until no earlier attempt's filesystem is on `run_dir`; recover one a dead worker left there. The reason
    it is still taken, or None when free."""
    with _released:
        if not _released.wait_for(lambda: run_dir not in _mounted.values(), timeout=timeout_s):
            return f"the previous attempt's filesystem was not given back within {timeout_s:g} s"
    if os.path.ismount(run_dir):
        recover(runs_dir)
    return (
        "its run dir is a mount point already (not one this worker can take over)" if os.path.ismount(run_dir) else None
    )


def _sampled(limit_mb: int, reason: str) -> DiskMode:
    capped = f"files capped at {2 * limit_mb:,} MiB"
    return DiskMode(
        SAMPLED, f"disk_limit_mb {limit_mb:,} MiB checked by the worker once per heartbeat ({capped}): {reason}"
    )


def host_summary(sandboxed: bool) -> str:
    """The worker's start line: how this host holds the disk limits of single-node jobs."""
    loop_devices, mkfs = host_can_mount()
    mode = decide(1, root=os.geteuid() == 0, several_nodes=False, loop_devices=loop_devices, mkfs=mkfs)
    if not sandboxed or mode is None or mode.mode == SAMPLED:
        why = "jobs run unsandboxed" if not sandboxed or mode is None else mode.why.split(": ", 1)[1]
        return f"disk limits: checked by the worker once per heartbeat, no file past twice its limit ({why})"
    return "disk limits: a filesystem of each job's disk_limit_mb per single-node attempt (ENOSPC at the limit)"


def for_attempt(
    run_dir: Path, runs_dir: Path, mark: str, limit_mb: int | None, several_nodes: bool, own_limit: bool = True
) -> DiskLimit:
    """How the attempt's disk limit holds, said to the worker's log, and its filesystem where it gets one. A
    filesystem that could not be made falls back to the sampled check, saying why."""
    loop_devices, mkfs = host_can_mount()
    mode = decide(limit_mb, root=os.geteuid() == 0, several_nodes=several_nodes, loop_devices=loop_devices, mkfs=mkfs,
                  own_limit=own_limit)  # fmt: skip
    if mode is None or limit_mb is None or mode.mode == SAMPLED:
        if mode is not None:
            log.info("attempt %s: %s", mark, mode.why)
        return DiskLimit(mode)
    taken = _wait_run_dir_free(run_dir, runs_dir, RELEASE_WAIT_S)
    if taken is not None:
        fallback = _sampled(limit_mb, taken)
        log.warning("attempt %s: %s", mark, fallback.why)
        return DiskLimit(fallback)
    try:
        disk = AttemptDisk.mount(run_dir, runs_dir, mark, limit_mb)
    except (OSError, subprocess.SubprocessError, RecursionError) as exc:
        fallback = _sampled(limit_mb, f"its filesystem could not be made: {exc}")
        log.warning("attempt %s: %s", mark, fallback.why)
        return DiskLimit(fallback)
    log.info("attempt %s: %s", mark, mode.why)
    with _released:
        _mounted[mark] = run_dir
    return DiskLimit(mode, disk)


# --- a worker that died mid-attempt --------------------------------------------------------------------------------


def _loop_backing(source: str) -> str | None:
    """The image file behind a loop device (`/dev/loop3`), as the kernel names it."""
    name = Path(source).name
    if not name.startswith("loop"):
        return None
    try:
        return Path(f"/sys/block/{name}/loop/backing_file").read_text().strip()
    except OSError:
        return None


def mounts_of(image: Path, mountinfo: str) -> list[Path]:
    """Where `image` is mounted (its loop device's mounts, binds included), deepest first."""
    found = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        source = line.split(" - ", 1)[1].split()[1]
        if _loop_backing(source) == str(image):
            found.append(Path(fields[4].replace("\\040", " ")))
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def recover(runs_dir: Path) -> int:
    """At the worker's start: the filesystems of attempts whose worker died (its pid names the image) copied back
    into their run dirs, unmounted and deleted. Returns how many were recovered. A run dir's files stay in view
    throughout but for the moment of the switch (no attempt of that job runs: its worker is gone)."""
    disks = runs_dir / DISKS_DIR
    recovered = 0
    for image in sorted(disks.glob("*.img")) if disks.is_dir() else []:
        pid = image.name.split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid() or _alive(int(pid)):
            continue
        try:
            for point in mounts_of(image, Path("/proc/self/mountinfo").read_text()):
                if point.parent == disks:  # the staging mount of one that died while being made
                    _run(["umount", "--lazy", str(point)])
                    continue
                top = os.open(point, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
                try:
                    _run(["umount", "--lazy", str(point)])
                    under = os.open(point, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
                    try:
                        sandbox_disk_copy.mirror(top, under)
                    finally:
                        os.close(under)
                finally:
                    os.close(top)
                log.warning("the filesystem of an attempt whose worker died (%s) was copied back to %s", image, point)
            image.unlink()
            with contextlib.suppress(OSError):
                image.with_suffix(".mnt").rmdir()
            recovered += 1
        except Exception:  # the next start tries again; the files stay where they are
            log.exception("could not recover the filesystem %s of an attempt whose worker died", image)
    return recovered
