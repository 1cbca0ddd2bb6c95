"""The copies that carry a job's run dir into its attempt's filesystem and back (worker/sandbox_disk.py): they keep
what the job made (owners, modes, times, links as links, hard links as links, holes as holes) and take on the
host's disk at most what the job's filesystem held, whatever the job made of its files."""

from __future__ import annotations

import contextlib
import errno
import os
import stat

Links = dict[tuple[int, int], tuple[int, str]]  # (device, inode) of a file with several names -> its first copy


def mirror(src_fd: int, dst_fd: int) -> None:
    """Make the folder `dst_fd` hold what the folder `src_fd` holds (its entries, owners, modes and times),
    following no link on either side: a file whose size, time and type match is left as it is, an entry `src`
    lacks is removed. Sparse files stay sparse and hard links stay links, so `dst` takes at most what `src` does."""
    links: Links = {}
    try:
        _mirror(src_fd, dst_fd, links)
    finally:
        for fd, _ in links.values():
            os.close(fd)
    _meta(src_fd, None, dst_fd, None)  # after its entries: their copies changed its times


def _mirror(src_fd: int, dst_fd: int, links: Links) -> None:
    names = set(os.listdir(src_fd))
    for name in os.listdir(dst_fd):  # what the job removed (an old checkpoint), or changed the type of
        if name not in names or _kind(src_fd, name) != _kind(dst_fd, name):
            _remove(dst_fd, name)
    for name in sorted(names):
        st = os.stat(name, dir_fd=src_fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o700, dir_fd=dst_fd)
            sub_src = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=src_fd)
            sub_dst = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dst_fd)
            try:
                _mirror(sub_src, sub_dst, links)
                _meta(sub_src, None, sub_dst, None)  # after its entries: their copies changed its times
            finally:
                os.close(sub_src)
                os.close(sub_dst)
        elif stat.S_ISLNK(st.st_mode):
            target = os.readlink(name, dir_fd=src_fd)
            with contextlib.suppress(FileNotFoundError):
                if os.readlink(name, dir_fd=dst_fd) == target:
                    continue
                _remove(dst_fd, name)
            os.symlink(target, name, dir_fd=dst_fd)
            _meta(src_fd, name, dst_fd, name)
        elif stat.S_ISREG(st.st_mode):
            _file(src_fd, dst_fd, name, st, links)
        # a fifo, socket or device node the job made: not kept (nothing of a run reads one)


def _kind(dir_fd: int, name: str) -> int | None:
    try:
        return stat.S_IFMT(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return None


def _remove(dir_fd: int, name: str) -> None:
    if _kind(dir_fd, name) == stat.S_IFDIR:
        sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
        try:
            for entry in os.listdir(sub):
                _remove(sub, entry)
        finally:
            os.close(sub)
        os.rmdir(name, dir_fd=dir_fd)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=dir_fd)


def _file(
    src_fd: int, dst_fd: int, name: str, st: os.stat_result, links: dict[tuple[int, int], tuple[int, str]]
) -> None:
    key = (st.st_dev, st.st_ino)
    if st.st_nlink > 1 and key in links:  # another name of a file copied already: a link, not a second copy
        first_dir, first = links[key]
        _remove(dst_fd, name)
        os.link(first, name, src_dir_fd=first_dir, dst_dir_fd=dst_fd, follow_symlinks=False)
        return
    if st.st_nlink > 1:
        links[key] = (os.dup(dst_fd), name)
    with contextlib.suppress(FileNotFoundError):
        old = os.stat(name, dir_fd=dst_fd, follow_symlinks=False)
        if old.st_size == st.st_size and old.st_mtime_ns == st.st_mtime_ns and old.st_nlink == 1:
            _meta(src_fd, name, dst_fd, name)
            return
        _remove(dst_fd, name)  # a fresh file: never write through another name of an old one
    src = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=src_fd)
    try:
        dst = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dst_fd)
        try:
            copy_sparse(src, dst, st.st_size)
        finally:
            os.close(dst)
    finally:
        os.close(src)
    _meta(src_fd, name, dst_fd, name)


def copy_sparse(src: int, dst: int, size: int) -> None:
    """Copy the data of `src` into the empty `dst`, leaving its holes holes (a file the job made sparse, 100 MiB
    long and 4 KiB on disk, stays 4 KiB on the host's disk)."""
    pos = 0
    while pos < size:
        try:
            data = os.lseek(src, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # only a hole from here on
                break
            raise
        end = os.lseek(src, data, os.SEEK_HOLE)
        os.lseek(dst, data, os.SEEK_SET)
        while data < end:  # in the kernel (copy_file_range refuses two filesystems: EXDEV)
            copied = os.sendfile(dst, src, data, end - data)
            if copied == 0:
                break
            data += copied
        pos = end
    os.ftruncate(dst, size)


def _meta(src_fd: int, src_name: str | None, dst_fd: int, dst_name: str | None) -> None:
    st = os.stat(src_name, dir_fd=src_fd, follow_symlinks=False) if src_name else os.fstat(src_fd)
    if dst_name is None:
        os.fchown(dst_fd, st.st_uid, st.st_gid)
        os.fchmod(dst_fd, stat.S_IMODE(st.st_mode))
        os.utime(dst_fd, ns=(st.st_atime_ns, st.st_mtime_ns))
        return
    os.chown(dst_name, st.st_uid, st.st_gid, dir_fd=dst_fd, follow_symlinks=False)
    if not stat.S_ISLNK(st.st_mode):
        os.chmod(dst_name, stat.S_IMODE(st.st_mode), dir_fd=dst_fd)  # after the chown: it clears setuid bits
    os.utime(dst_name, ns=(st.st_atime_ns, st.st_mtime_ns), dir_fd=dst_fd, follow_symlinks=False)
