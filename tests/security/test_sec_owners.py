"""Ownership rules a member could step around (found by the attacker review, docs/security.md):

- resuming from another user's checkpoint: the owner check looked only at `<runs>/job_N/<dir>/<file>`, so
  `job_N/work/sub/x.pt` (any depth but two) passed;
- a bundle's left-out record (PUT /api/code/{sha}/left-out): any member could overwrite anyone's; now only
  a user who uploaded the bundle (POST /api/code) or an admin.

Over a real socket, with users added through the API (the server's token is the first admin's).
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from pathlib import Path

import httpx
import pytest

from core.users import Principal
from tests.support import deadlines
from tests.support.attack import Server
from tests.support.jobs import DIGITS_SPEC

RUNS = Path("/srv/runs")


@pytest.mark.parametrize(
    ("path", "owner"),
    [
        ("job_7/checkpoints/step_00000010.pt", 7),
        ("job_7/work/sub/x.pt", 7),  # was None: only two levels below job_N were looked at
        ("job_7/x.pt", 7),  # was None
        ("job_7/a/b/c/d/e.pt", 7),
        ("job_007/checkpoints/x.pt", None),  # not job 7's run dir name
        ("shared/x.pt", None),
        ("x.pt", None),
    ],
)
def test_the_job_owning_a_resume_checkpoint_at_any_depth(path: str, owner: int | None) -> None:
    from api.routes.jobs import resume_owner_job

    assert resume_owner_job(RUNS / path, RUNS) == owner
    assert resume_owner_job(Path("/elsewhere") / path, RUNS) is None


def _user(server: Server, name: str, role: str = "member") -> httpx.Client:
    r = httpx.post(
        f"{server.base}/api/users",
        json={"name": name, "role": role},
        headers=server.auth,
        timeout=deadlines.seconds(10),
    )
    assert r.status_code == 201, r.text
    token = r.json()["token"]["token"]
    return httpx.Client(base_url=f"{server.base}/api", headers={"Authorization": f"Bearer {token}"}, timeout=30)


def test_a_member_cannot_resume_from_a_deeper_file_of_another_users_job(server: Server) -> None:
    alice, mallory = _user(server, "alice"), _user(server, "mallory")
    r = alice.post("/jobs", json={**DIGITS_SPEC, "name": "alices"})
    assert r.status_code == 201, r.text
    deep = server.settings.resolved_runs_dir / f"job_{r.json()['id']}" / "work" / "sub" / "x.pt"
    deep.parent.mkdir(parents=True)
    deep.write_bytes(b"weights")
    stolen = mallory.post("/jobs", json={**DIGITS_SPEC, "name": "mallorys", "resume_from": str(deep)})
    assert stolen.status_code == 403, stolen.text
    assert "resuming" in stolen.text and "mallory" in stolen.text
    own = alice.post("/jobs", json={**DIGITS_SPEC, "name": "alices-again", "resume_from": str(deep)})
    assert own.status_code == 201, own.text


def _bundle() -> bytes:
    """The same bytes at every call: gzip's header carries a time, fixed at 0 here (a call a second later made
    another bundle, a 201 where the test expects the second upload's 200)."""
    raw = io.BytesIO()
    with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        data = b"print('hi')\n"
        info = tarfile.TarInfo("train.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return raw.getvalue()


def test_only_an_uploader_or_an_admin_writes_a_bundles_left_out_record(server: Server) -> None:
    alice, mallory = _user(server, "alice2"), _user(server, "mallory2")
    r = alice.post("/code", content=_bundle(), headers={"Content-Type": "application/gzip"})
    assert r.status_code == 201, r.text
    sha = r.json()["sha256"]
    record = {"entries": [{"path": "data.bin", "bytes": 10, "files": 1, "file": ".gitignore", "line": 1,
                           "pattern": "*.bin"}]}  # fmt: skip
    forged = {"entries": [{"path": "evil", "bytes": 1, "files": 1, "file": ".gitignore", "line": 9, "pattern": "x"}]}
    assert alice.put(f"/code/{sha}/left-out", content=json.dumps(record)).status_code == 200
    refused = mallory.put(f"/code/{sha}/left-out", content=json.dumps(forged))
    assert refused.status_code == 403, refused.text
    assert "did not upload it" in refused.text
    assert [e["path"] for e in alice.get(f"/code/{sha}/left-out").json()] == ["data.bin"]  # alice's record stands
    admin = httpx.put(f"{server.base}/api/code/{sha}/left-out", content=json.dumps(forged), headers=server.auth)
    assert admin.status_code == 200, admin.text
    # Mallory uploads the same bytes herself: she is then one of its uploaders (the latest record wins).
    assert mallory.post("/code", content=_bundle(), headers={"Content-Type": "application/gzip"}).status_code == 200
    assert mallory.put(f"/code/{sha}/left-out", content=json.dumps(forged)).status_code == 200


@pytest.mark.parametrize(
    ("role", "user_id", "uploaders", "may"),
    [
        ("member", 2, {2}, True),
        ("member", 3, {2}, False),
        ("member", 3, set(), False),  # a bundle with no recorded uploader: admins only
        ("admin", 1, set(), True),
        ("viewer", 2, {2}, True),  # viewers never get here (every write needs member: api/auth.py)
    ],
)
def test_who_may_record_a_bundles_left_out_files(role: str, user_id: int, uploaders: set[int], may: bool) -> None:
    from api.routes.code import may_record_left_out

    assert may_record_left_out(Principal(user_id, "u", role), uploaders) is may  # type: ignore[arg-type]
