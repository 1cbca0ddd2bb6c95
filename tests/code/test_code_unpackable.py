"""Issue 19 item 5 (bundles no worker could unpack are refused at upload) and item 6 (the bundle
store's size cap, least recently used first)."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from core import bundles
from core.settings import Settings
from tests.support.bundles import make_tar, member

GZ = {"Content-Type": "application/gzip"}


def _folder(name: str) -> tarfile.TarInfo:
    info = member(name, tarfile.DIRTYPE)
    info.mode = 0o755
    return info


UNPACKABLE = [
    pytest.param([(member("a"), b"x"), (member("a/b.py"), b"y")], "also holds as a file", id="file-then-inside"),
    pytest.param([(member("a/b.py"), b"y"), (member("a"), b"x")], "also holds a folder", id="inside-then-file"),
    # one name listed twice, as a folder and as a file: a duplicate (refused before too)
    pytest.param([(_folder("pkg"), None), (member("pkg"), b"x")], "appears twice", id="folder-then-file"),
    pytest.param([(member("pkg"), b"x"), (_folder("pkg"), None)], "appears twice", id="file-then-folder"),
    pytest.param([(member("x" * 300 + ".py"), b"x")], "over the 255", id="long-component"),
    pytest.param([(member("d/" + "é" * 128 + "/m.py"), b"x")], "256 bytes", id="long-component-in-utf8"),
]


@pytest.mark.parametrize(("members", "message"), UNPACKABLE)
def test_check_refuses_what_no_worker_could_unpack(tmp_path: Path, members, message: str) -> None:
    archive = tmp_path / "b.tar.gz"
    archive.write_bytes(make_tar(members))
    with pytest.raises(bundles.UnsafeBundle, match=message):
        bundles.check(archive, bundles.Limits(10**6, 10**6, 100))


@pytest.mark.parametrize(("members", "message"), UNPACKABLE)
def test_upload_refuses_what_no_worker_could_unpack(client: TestClient, settings: Settings, members, message):
    r = client.post("/api/code", content=make_tar(members), headers=GZ)
    assert r.status_code == 422, r.text
    assert message in r.json()["detail"]
    assert not list(bundles.store_dir(settings).glob("*.tar.gz"))


def test_folders_and_files_that_fit_together_pass(tmp_path: Path) -> None:
    archive = tmp_path / "b.tar.gz"
    members = [(_folder("pkg"), None), (member("pkg/__init__.py"), b""), (member("pkg.py"), b"x"),
               (member("x" * 255), b"x")]  # fmt: skip
    archive.write_bytes(make_tar(members))
    found = bundles.check(archive, bundles.Limits(10**6, 10**6, 100))
    assert found.files == 3
    dest = tmp_path / "out"
    bundles.unpack(archive, bundles.Limits(10**6, 10**6, 100), dest)
    assert (dest / "pkg" / "__init__.py").is_file() and (dest / ("x" * 255)).is_file()


@pytest.mark.parametrize(
    ("stored", "cap", "protected", "expected"),
    [
        ([("a", 10, 1.0), ("b", 10, 2.0)], 20, set(), []),  # fits
        ([("a", 10, 1.0), ("b", 10, 2.0), ("c", 10, 3.0)], 20, set(), ["a"]),  # least recently used first
        ([("a", 10, 3.0), ("b", 10, 2.0), ("c", 10, 1.0)], 10, set(), ["c", "b"]),
        ([("a", 10, 1.0), ("b", 10, 2.0), ("c", 10, 3.0)], 20, {"a"}, ["b"]),  # a live job's bundle stays
        ([("a", 30, 1.0), ("b", 10, 2.0)], 20, {"a"}, ["b"]),  # protected ones alone over the cap: they stay
    ],
)
def test_lru_victims(stored, cap: int, protected: set[str], expected: list[str]) -> None:
    assert bundles.lru_victims(stored, cap, protected) == expected


def _upload(client: TestClient, name: str, size: int) -> str:
    r = client.post("/api/code", content=make_tar([(member(name), os.urandom(size))]), headers=GZ)
    assert r.status_code == 201, r.text
    return r.json()["sha256"]


def test_the_store_keeps_to_its_cap_least_recently_used_first(api_settings, auth_headers) -> None:
    from api.app import create_app

    settings = api_settings(max_bundle_store_bytes=1_000_000)
    with TestClient(create_app(settings), headers=auth_headers) as client:
        first = _upload(client, "a.py", 300_000)
        second = _upload(client, "b.py", 300_000)
        os.utime(bundles.manifest_path(settings, first), (1, 1))  # both long unused ...
        os.utime(bundles.manifest_path(settings, second), (2, 2))
        assert client.head(f"/api/code/{first}").status_code == 200  # ... then `first` is asked for again
        third = _upload(client, "c.py", 300_000)
        fourth = _upload(client, "d.py", 300_000)  # over 1 MB: the least recently used one goes
        stored = {p.name.removesuffix(".tar.gz") for p in bundles.store_dir(settings).glob("*.tar.gz")}
    assert stored == {first, third, fourth}
    assert not bundles.manifest_path(settings, second).exists()
