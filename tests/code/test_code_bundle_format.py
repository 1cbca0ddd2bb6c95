"""The bundle format (core/bundles.py): what is packed, determinism, and every unsafe or oversized archive refused."""

from __future__ import annotations

import gzip
import io
import os
import tarfile
from pathlib import Path

import pytest

from core import bundles
from tests.support.bundles import make_tar, member

LIMITS = bundles.Limits(max_bytes=10**8, max_unpacked_bytes=10**8, max_files=1000)


def _paths(folder: Path) -> list[str]:
    return [f.path for f in bundles.collect(folder)]


def test_ignore_rules_and_git_never(project: Path) -> None:
    (project / "mypkg" / "__pycache__").mkdir()
    (project / "mypkg" / "__pycache__" / "models.cpython-311.pyc").write_bytes(b"pyc")
    (project / "mypkg" / "out").mkdir()
    (project / "mypkg" / "out" / "a.txt").write_text("a")
    (project / "mypkg" / ".gitignore").write_text("out/\n")  # a nested .gitignore applies below its folder
    (project / ".git" / "objects").mkdir()
    (project / ".git" / "objects" / "x").write_bytes(b"obj")
    assert _paths(project) == [
        ".gitignore",
        ".rankzeroignore",
        "helpers.py",
        "keep.log",  # re-included by `!keep.log`
        "mypkg/.gitignore",
        "mypkg/__init__.py",
        "mypkg/models.py",
    ]  # no .git, data/ (.gitignore), checkpoints/ (.rankzeroignore), *.log, __pycache__, mypkg/out/


def test_rankzeroignore_can_reinclude_a_gitignored_file(project: Path) -> None:
    (project / "data" / "small.csv").write_text("1,2\n")
    (project / ".gitignore").write_text("*.csv\n")
    (project / ".rankzeroignore").write_text("checkpoints/\ndata/big.bin\n!data/small.csv\n")
    assert "data/small.csv" in _paths(project)
    assert "data/big.bin" not in _paths(project)


def test_identical_trees_identical_sha256(project: Path, tmp_path: Path) -> None:
    twin = tmp_path / "twin"
    os.system(f"cp -a {project} {twin}")
    for path in twin.rglob("*"):
        os.utime(path, (1_000_000, 1_000_000))  # other times: the archive must not carry them
    a = bundles.pack(project, tmp_path / "a.tar.gz")
    b = bundles.pack(twin, tmp_path / "b.tar.gz")
    assert a.sha256 == b.sha256 == bundles.file_sha256(tmp_path / "a.tar.gz")
    assert a.files == len(bundles.collect(project)) == 6
    (twin / "helpers.py").write_text("X = 2\n")
    assert bundles.pack(twin, tmp_path / "c.tar.gz").sha256 != a.sha256


def test_links_when_packing(project: Path, tmp_path: Path) -> None:
    (project / "alias.py").symlink_to("helpers.py")  # inside the folder: stored as the file itself
    packed = bundles.pack(project, tmp_path / "a.tar.gz")
    with tarfile.open(packed.archive) as tar:
        alias = tar.getmember("alias.py")
        assert alias.isreg() and tar.extractfile(alias).read() == b"X = 1\n"
    outside = tmp_path / "secret.txt"
    outside.write_text("no")
    (project / "leak.txt").symlink_to(outside)
    with pytest.raises(bundles.BundleError, match=r"leak.txt is a symbolic link leaving the folder.*\.rankzeroignore"):
        bundles.collect(project)
    (project / ".rankzeroignore").write_text("leak.txt\n")
    assert "leak.txt" not in _paths(project)


def test_unpacks_what_was_packed(project: Path, tmp_path: Path) -> None:
    packed = bundles.pack(project, tmp_path / "a.tar.gz")
    dest = tmp_path / "out"
    dest.mkdir()
    found = bundles.scan(packed.archive, LIMITS, dest=dest)
    assert found.files == packed.files and found.unpacked_bytes == packed.unpacked_bytes
    assert (dest / "mypkg" / "models.py").read_text().startswith("def build")
    assert found.top_level_modules() == {"mypkg", "helpers"}


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ([(member("../x"), b"x")], "contains '..'"),
        ([(member("ok/../../x"), b"x")], "contains '..'"),
        ([(member("/etc/cron.d/x"), b"x")], "absolute path"),
        ([(member("out", tarfile.SYMTYPE, "/etc/passwd"), None)], "symbolic link to '/etc/passwd' leaving the tree"),
        ([(member("up", tarfile.SYMTYPE, "../../x"), None)], "leaving the tree"),
        ([(member("a"), b"a"), (member("b", tarfile.LNKTYPE, "a"), None)], "hard link"),
        ([(member("fifo", tarfile.FIFOTYPE), None)], "device or FIFO"),
        ([(member("tty", tarfile.CHRTYPE), None)], "device or FIFO"),
        ([(member("sda", tarfile.BLKTYPE), None)], "device or FIFO"),
        ([(member("a"), b"1"), (member("./a"), b"2")], "appears twice"),
    ],
    ids=["dotdot", "dotdot-inside", "absolute", "symlink-out", "symlink-up", "hardlink", "fifo", "chr", "blk", "dup"],
)
def test_unsafe_archives_refused(tmp_path: Path, members: list, message: str) -> None:
    archive = tmp_path / "bad.tar.gz"
    archive.write_bytes(make_tar(members))
    dest = tmp_path / "out"
    dest.mkdir()
    with pytest.raises(bundles.UnsafeBundle, match=message):
        bundles.scan(archive, LIMITS, dest=dest)
    assert not (tmp_path / "x").exists()


def test_not_an_archive(tmp_path: Path) -> None:
    archive = tmp_path / "junk.tar.gz"
    archive.write_bytes(b"not gzip at all" * 100)
    with pytest.raises(bundles.BundleError, match="not a valid tar.gz"):
        bundles.scan(archive, LIMITS)
    good = make_tar([(member("a.py"), b"x" * 10_000)])
    archive.write_bytes(good[: len(good) - 6])  # truncated: the gzip trailer is checked
    with pytest.raises(bundles.BundleError, match="not a valid tar.gz"):
        bundles.scan(archive, LIMITS)


def test_huge_tar_header_refused_without_buffering_it(tmp_path: Path) -> None:
    info = member("x" * 10)
    info.pax_headers = {"comment": "y" * (bundles.READ_CAP + 10)}
    archive = tmp_path / "pax.tar.gz"
    raw = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=raw, mode="wb") as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        info.size = 1
        tar.addfile(info, io.BytesIO(b"1"))
    archive.write_bytes(raw.getvalue())
    with pytest.raises(bundles.UnsafeBundle, match="in one piece"):
        bundles.scan(archive, LIMITS)


@pytest.mark.parametrize(
    ("limits", "setting", "what"),
    [
        (bundles.Limits(10**8, 10**8, 3), "max_bundle_files", "file count is 4 files"),
        (bundles.Limits(10**8, 5_000, 1000), "max_bundle_unpacked_bytes", "unpacked size"),
    ],
)
def test_limits_refused_with_their_setting(tmp_path: Path, limits: bundles.Limits, setting: str, what: str) -> None:
    archive = tmp_path / "big.tar.gz"
    archive.write_bytes(make_tar([(member(f"data/{i}.bin"), b"\0" * 2_000) for i in range(4)]))
    with pytest.raises(bundles.BundleTooLarge) as info:
        bundles.scan(archive, limits)
    assert info.value.setting == setting
    message = str(info.value)
    assert what in message and f"RANKZERO_{setting.upper()}" in message
    assert ".rankzeroignore" in message and "largest: data/" in message


def test_compressed_size_limit_in_store(api_settings, tmp_path: Path) -> None:
    settings = api_settings(max_bundle_bytes=1024)
    tmp = bundles.incoming(settings)
    tmp.write_bytes(os.urandom(4096))
    with pytest.raises(bundles.BundleTooLarge, match=r"compressed size is 4,096 bytes.*\(RANKZERO_MAX_BUNDLE_BYTES\)"):
        bundles.store(settings, tmp, "0" * 64)
    assert not tmp.exists()
