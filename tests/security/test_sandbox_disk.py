"""Issue 34 part 3: a disk limit the filesystem enforces (worker/sandbox_disk.py). The rule that picks how a job's
limit holds, the copy that carries a run dir into its filesystem and back (sparse files, hard links, links and
removals), and the image's free space against the limit (a real ext4 image, where this host can mount one).
Real launches: tests/security/test_sandbox_kernel.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from worker import sandbox_disk, sandbox_disk_copy
from worker.sandbox_disk import FILESYSTEM, SAMPLED

MIB = 2**20


@pytest.mark.parametrize(
    ("limit", "host", "mode", "words"),
    [  # host: (worker is root, the attempt spans hosts, loop devices, mkfs.ext4, the spec set the limit itself)
        (None, (True, False, True, True, True), None, None),
        (50, (True, False, True, True, True), FILESYSTEM, "enforced by a filesystem"),
        (50, (True, False, True, True, False), SAMPLED, "sets no disk_limit_mb of its own"),
        (50, (False, False, True, True, True), SAMPLED, "not root"),
        (50, (True, True, True, True, True), SAMPLED, "several hosts"),
        (50, (True, False, False, True, True), SAMPLED, "no loop devices"),
        (50, (True, False, True, False, True), SAMPLED, "mkfs.ext4"),
    ],
)
def test_how_a_disk_limit_holds(
    limit: int | None, host: tuple[bool, bool, bool, bool, bool], mode: str | None, words: str | None
) -> None:
    root, several, loop, mkfs, own = host
    decided = sandbox_disk.decide(limit, root=root, several_nodes=several, loop_devices=loop, mkfs=mkfs, own_limit=own)
    if mode is None:
        assert decided is None
        return
    assert decided is not None and decided.mode == mode and words in decided.why
    if mode == SAMPLED:  # the fallback names what it does: the sample, and the cap on one file
        assert "once per heartbeat" in decided.why and "100 MiB" in decided.why


def _dir_fd(path: Path) -> int:
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY)


def _mirror(src: Path, dst: Path) -> None:
    s, d = _dir_fd(src), _dir_fd(dst)
    try:
        sandbox_disk_copy.mirror(s, d)
    finally:
        os.close(s)
        os.close(d)


def test_the_copy_carries_what_the_job_left_and_removes_what_it_removed(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    (src / "checkpoints").mkdir(parents=True)
    dst.mkdir()
    (src / "checkpoints" / "step_00000020.pt").write_bytes(b"new checkpoint")
    (src / "events.jsonl").write_text('{"seq": 1}\n')
    (src / "link").symlink_to("/etc/shadow")  # a link the job made: copied as a link, never followed
    os.chmod(src / "events.jsonl", 0o640)
    # What an earlier copy put there and the job removed since (a checkpoint past keep_last), or made another kind.
    (dst / "checkpoints").mkdir()
    (dst / "checkpoints" / "step_00000010.pt").write_bytes(b"old")
    (dst / "events.jsonl").mkdir()

    _mirror(src, dst)

    assert sorted(p.name for p in (dst / "checkpoints").iterdir()) == ["step_00000020.pt"]
    assert (dst / "checkpoints" / "step_00000020.pt").read_bytes() == b"new checkpoint"
    assert (dst / "events.jsonl").read_text() == '{"seq": 1}\n'
    assert (dst / "events.jsonl").stat().st_mode & 0o777 == 0o640
    assert (dst / "events.jsonl").stat().st_mtime_ns == (src / "events.jsonl").stat().st_mtime_ns
    assert (dst / "link").is_symlink() and os.readlink(dst / "link") == "/etc/shadow"


def test_an_unchanged_file_is_not_copied_again(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    (src / "step_00000010.pt").write_bytes(os.urandom(4096))
    _mirror(src, dst)
    inode = (dst / "step_00000010.pt").stat().st_ino
    _mirror(src, dst)
    assert (dst / "step_00000010.pt").stat().st_ino == inode  # the second pass (the attempt's end) left it


def test_sparse_files_and_hard_links_take_no_more_room_after_the_copy(tmp_path: Path) -> None:
    """What the job can make of a small filesystem must not grow on the host's disk: a file 1 GiB long with one
    block of data, and the same file under 50 names."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    with open(src / "sparse.bin", "wb") as fh:
        fh.seek(512 * MIB)
        fh.write(b"x" * 4096)
        fh.truncate(1024 * MIB)
    (src / "data.bin").write_bytes(os.urandom(MIB))
    for i in range(50):
        os.link(src / "data.bin", src / f"again{i}.bin")

    _mirror(src, dst)

    sparse = (dst / "sparse.bin").stat()
    assert sparse.st_size == 1024 * MIB and sparse.st_blocks * 512 <= MIB
    with open(dst / "sparse.bin", "rb") as fh:
        fh.seek(512 * MIB)
        assert fh.read(4096) == b"x" * 4096
    data = (dst / "data.bin").stat()
    assert data.st_nlink == 51 and (dst / "again49.bin").stat().st_ino == data.st_ino
    assert (dst / "again7.bin").read_bytes() == (src / "data.bin").read_bytes()


CAN_MOUNT = os.geteuid() == 0 and all(sandbox_disk.host_can_mount())


@pytest.mark.slow  # runs mkfs.ext4 and mount (the unit tier starts no process)
@pytest.mark.skipif(not CAN_MOUNT, reason="mounting an image needs root and loop devices (the sampled check applies)")
@pytest.mark.parametrize("limit_mb", [50, 500, 3000])
def test_the_images_free_space_is_the_limit(tmp_path: Path, limit_mb: int) -> None:
    image, mount = tmp_path / "disk.img", tmp_path / "mnt"
    mount.mkdir()
    with open(image, "xb") as fh:
        fh.truncate(sandbox_disk.image_bytes(limit_mb))
    subprocess.run([*sandbox_disk.MKFS, "-J", f"size={sandbox_disk.journal_mb(limit_mb)}", str(image)], check=True)
    subprocess.run(["mount", "-o", sandbox_disk.MOUNT_OPTIONS, str(image), str(mount)], check=True)
    try:
        free = os.statvfs(mount)
        free_mb = free.f_bavail * free.f_frsize / MIB
    finally:
        subprocess.run(["umount", str(mount)], check=True)
    assert limit_mb <= free_mb <= limit_mb * 1.03 + 10, f"{free_mb:.1f} MiB free for a {limit_mb} MiB limit"
    assert image.stat().st_blocks * 512 < 8 * MIB + limit_mb * MIB // 100  # sparse: made in no time, little room


def _mounted_at(folder: Path) -> bool:
    return any(line.split()[4] == str(folder) for line in Path("/proc/self/mountinfo").read_text().splitlines())


@pytest.mark.slow  # runs mkfs.ext4 and mount (the unit tier starts no process)
@pytest.mark.skipif(not CAN_MOUNT, reason="mounting an image needs root and loop devices (the sampled check applies)")
def test_an_attempt_filesystem_shows_the_run_dir_and_gives_it_back(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    run_dir = runs / "job_1"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "step_00000010.pt").write_bytes(b"resume from me")
    disk = sandbox_disk.AttemptDisk.mount(run_dir, runs, "1-2-abc", 20)
    try:
        assert _mounted_at(run_dir)
        assert (run_dir / "checkpoints" / "step_00000010.pt").read_bytes() == b"resume from me"  # copied in
        (run_dir / "checkpoints" / "step_00000020.pt").write_bytes(b"new")
        (run_dir / "checkpoints" / "step_00000010.pt").unlink()  # keep_last rotated it out
        with pytest.raises(OSError, match="No space left"):
            (run_dir / "big.bin").write_bytes(b"\0" * (40 * MIB))
        (run_dir / "big.bin").unlink()
    finally:
        disk.unmount()
    assert not _mounted_at(run_dir) and not disk.image.exists()
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step_00000020.pt"]


@pytest.mark.slow  # runs mkfs.ext4 and mount (the unit tier starts no process)
@pytest.mark.skipif(not CAN_MOUNT, reason="mounting an image needs root and loop devices (the sampled check applies)")
def test_a_dead_workers_filesystem_is_copied_back_at_the_next_start(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    run_dir = runs / "job_1"
    run_dir.mkdir(parents=True)
    (run_dir / "before.txt").write_text("a")
    disk = sandbox_disk.AttemptDisk.mount(run_dir, runs, "1-1-abc", 20)
    try:
        (run_dir / "during.txt").write_text("b")  # on the attempt's filesystem only
        gone = subprocess.Popen(["true"])
        gone.wait()
        disk.image.rename(disk.image.with_name(f"{gone.pid}-1-1-abc.img"))  # the image of a worker now dead
        os.close(disk.under_fd)
        assert sandbox_disk.recover(runs) == 1
    finally:
        if _mounted_at(run_dir):
            subprocess.run(["umount", "--lazy", str(run_dir)], check=False)
    assert not _mounted_at(run_dir)
    assert (run_dir / "during.txt").read_text() == "b" and (run_dir / "before.txt").read_text() == "a"
    assert list((runs / sandbox_disk.DISKS_DIR).iterdir()) == []


@pytest.mark.parametrize(
    ("sandboxed", "euid", "can_mount", "words"),
    [
        (True, 0, (True, True), "a filesystem of each job's disk_limit_mb"),
        (True, 1000, (True, True), "once per heartbeat, no file past twice its limit (the worker is not root"),
        (True, 0, (False, True), "(this host has no loop devices"),
        (False, 0, (True, True), "(jobs run unsandboxed)"),
    ],
)
def test_the_worker_says_at_its_start_how_disk_limits_hold(
    monkeypatch: pytest.MonkeyPatch, sandboxed: bool, euid: int, can_mount: tuple[bool, bool], words: str
) -> None:
    monkeypatch.setattr(sandbox_disk.os, "geteuid", lambda: euid)
    monkeypatch.setattr(sandbox_disk, "host_can_mount", lambda: can_mount)
    assert words in sandbox_disk.host_summary(sandboxed)
