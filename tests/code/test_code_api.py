"""POST/HEAD/GET /api/code, and submitting a job that refers to a bundle."""

from __future__ import annotations

import socket
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from fastapi.testclient import TestClient

from api.app import create_app
from core import bundles
from core.settings import Settings
from tests.support.bundles import make_tar, member
from tests.support.deadlines import deadline_in
from tests.support.jobs import DIGITS_SPEC
from tests.support.settings import API_TOKEN

GZ = {"Content-Type": "application/gzip"}


def _packed(folder: Path, tmp_path: Path) -> tuple[bytes, str]:
    packed = bundles.pack(folder, tmp_path / "bundle.tar.gz")
    return packed.archive.read_bytes(), packed.sha256


def test_upload_head_get_files_and_idempotent_reupload(client: TestClient, settings: Settings, project, tmp_path):
    body, sha = _packed(project, tmp_path)
    assert client.head(f"/api/code/{sha}").status_code == 404
    r = client.post("/api/code", content=body, headers=GZ)
    assert r.status_code == 201, r.text
    assert r.json() == {"sha256": sha, "bytes": len(body), "files": 6, "unpacked_bytes": r.json()["unpacked_bytes"]}
    stored = bundles.archive_path(settings, sha)
    before = stored.stat()
    assert stored.parent == settings.resolved_runs_dir / ".bundles"

    again = client.post("/api/code", content=body, headers={**GZ, "X-Bundle-SHA256": f"sha256:{sha}"})
    assert again.status_code == 200 and again.json()["sha256"] == sha
    after = stored.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)  # not written again
    assert [p.name for p in stored.parent.iterdir() if p.name.startswith(".incoming-")] == []

    head = client.head(f"/api/code/{sha}")
    assert head.status_code == 200 and head.headers["x-bundle-bytes"] == str(len(body))
    got = client.get(f"/api/code/{sha}")
    assert got.status_code == 200 and got.content == body
    files = client.get(f"/api/code/{sha}/files").json()
    assert {f["path"] for f in files["paths"]} >= {"mypkg/models.py", "helpers.py", "keep.log"}
    assert client.get(f"/api/code/{'0' * 64}/files").status_code == 404
    assert client.get("/api/code/not-a-sha").status_code == 422


def test_sha_header_mismatch_and_wrong_type(client: TestClient, project, tmp_path):
    body, sha = _packed(project, tmp_path)
    r = client.post("/api/code", content=body, headers={**GZ, "X-Bundle-SHA256": "0" * 64})
    assert r.status_code == 400 and sha in r.json()["detail"]
    r = client.post("/api/code", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 415 and "application/gzip" in r.json()["detail"]


def test_unsafe_archive_refused_at_upload(client: TestClient, settings: Settings):
    for members, message in [
        ([(member("../x"), b"x")], "'..'"),
        ([(member("/abs"), b"x")], "absolute path"),
        ([(member("out", tarfile.SYMTYPE, "/etc/passwd"), None)], "symbolic link"),
        ([(member("fifo", tarfile.FIFOTYPE), None)], "device or FIFO"),
    ]:
        r = client.post("/api/code", content=make_tar(members), headers=GZ)
        assert r.status_code == 422, r.text
        assert message in r.json()["detail"] and "refused" in r.json()["detail"]
    assert [p for p in bundles.store_dir(settings).iterdir() if not p.name.startswith(".")] == []
    r = client.post("/api/code", content=b"\x1f\x8b not really", headers=GZ)
    assert r.status_code == 422 and "not a valid tar.gz" in r.json()["detail"]


def test_each_limit_refused_with_its_message(api_settings: Callable[..., Settings], auth_headers, project, tmp_path):
    body, _ = _packed(project, tmp_path)
    cases = [
        ({"max_bundle_bytes": 1024}, 413, "RANKZERO_MAX_BUNDLE_BYTES"),
        ({"max_bundle_files": 2}, 422, "RANKZERO_MAX_BUNDLE_FILES"),
        ({"max_bundle_unpacked_bytes": 1024}, 422, "RANKZERO_MAX_BUNDLE_UNPACKED_BYTES"),
    ]
    big = body + b"\0" * 2048 if len(body) <= 1024 else body
    for overrides, code, setting in cases:
        settings = api_settings(**overrides)
        if "max_bundle_unpacked_bytes" in overrides:
            (project / "mypkg" / "weights.py").write_text("W = 0\n" * 400)
            body, _ = _packed(project, tmp_path)
        with TestClient(create_app(settings), headers=auth_headers) as c:
            r = c.post("/api/code", content=big if code == 413 else body, headers=GZ)
        assert r.status_code == code, r.text
        assert setting in r.json()["detail"] and ".rankzeroignore" in r.json()["detail"]


def test_uploads_turned_off(api_settings: Callable[..., Settings], auth_headers, project, tmp_path):
    body, _ = _packed(project, tmp_path)
    with TestClient(create_app(api_settings(allow_code_upload=False)), headers=auth_headers) as c:
        r = c.post("/api/code", content=body, headers=GZ)
        assert r.status_code == 403
        assert "RANKZERO_ALLOW_CODE_UPLOAD=false" in r.json()["detail"]
        r = c.post("/api/jobs", json={**DIGITS_SPEC, "nproc": 1, "code": f"sha256:{'a' * 64}"})
        assert r.status_code == 422 and "RANKZERO_ALLOW_CODE_UPLOAD=false" in r.json()["detail"][0]["msg"]


def test_upload_refused_without_auth_before_the_body_is_read(settings: Settings, live_api):
    """A 50 MB upload announced without credentials is answered 401 while its body has not been sent."""
    base = urlsplit(live_api(settings))
    with socket.create_connection((base.hostname, base.port), timeout=10) as sock:
        sock.sendall(
            b"POST /api/code HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/gzip\r\n"
            b"Content-Length: 50000000\r\n\r\n" + b"\x1f\x8b" + b"\0" * 1000
        )
        answer = sock.recv(4096).decode("latin-1")  # 49.99 MB of the body are never sent: an answer means unread
    assert answer.startswith("HTTP/1.1 401"), answer
    assert not any(p.name.startswith(".incoming-") for p in bundles.store_dir(settings).glob("*"))


def test_submit_with_code(client: TestClient, settings: Settings, project, tmp_path):
    spec = {**DIGITS_SPEC, "nproc": 1, "model": {"name": "mypkg.models:build"}}
    missing = f"sha256:{'a' * 64}"
    r = client.post("/api/jobs", json={**spec, "code": missing})
    assert r.status_code == 422
    (detail,) = r.json()["detail"]
    assert detail["loc"] == ["body", "code"] and "rankzero submit job.yaml --code DIR" in detail["msg"]

    r = client.post("/api/jobs", json=spec)  # user code from outside any bundle: the allow-list decides
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "model", "name"]

    body, sha = _packed(project, tmp_path)
    assert client.post("/api/code", content=body, headers=GZ).status_code == 201
    r = client.post("/api/jobs", json={**spec, "code": f"sha256:{sha}"})
    assert r.status_code == 201, r.text  # mypkg is in the job's own bundle: no RANKZERO_ALLOWED_CODE needed
    job = client.get(f"/api/jobs/{r.json()['id']}").json()
    assert job["spec"]["code"] == f"sha256:{sha}"
    assert (job["code_bytes"], job["code_files"]) == (len(body), 6)

    r = client.post("/api/jobs", json={**spec, "model": {"name": "otherpkg.models:build"}, "code": f"sha256:{sha}"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "model", "name"]


def test_bundle_hiding_the_trainer_refused(client: TestClient, tmp_path: Path):
    folder = tmp_path / "shadow"
    (folder / "trainer").mkdir(parents=True)
    (folder / "trainer" / "__init__.py").write_text("")
    body, sha = _packed(folder, tmp_path)
    assert client.post("/api/code", content=body, headers=GZ).status_code == 201
    r = client.post("/api/jobs", json={**DIGITS_SPEC, "nproc": 1, "code": f"sha256:{sha}"})
    assert r.status_code == 422 and "hide rankzero's trainer" in r.json()["detail"][0]["msg"]


def test_upload_cut_off_leaves_nothing_behind(settings: Settings, live_api):
    base = urlsplit(live_api(settings))
    with socket.create_connection((base.hostname, base.port), timeout=10) as sock:
        sock.sendall(
            b"POST /api/code HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/gzip\r\n"
            b"Authorization: Bearer " + API_TOKEN.encode() + b"\r\nContent-Length: 5000000\r\n\r\n" + b"\0" * 200_000
        )
        time.sleep(0.5)
    deadline = deadline_in(10)
    while any(bundles.store_dir(settings).glob(".incoming-*")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(bundles.store_dir(settings).glob(".incoming-*"))
    assert not any(bundles.store_dir(settings).glob("*.tar.gz"))
