"""Any file name a job writes is listed (issue 37): a control character or bytes that are not UTF-8 in an
output's name made the outputs listing answer 500; now such a file is listed with those escaped, marked not
downloadable, and the other files are served as before."""

from __future__ import annotations

import os

import pytest

from api.routes.outputs import escaped
from core.tables import JobStatus


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("plain/ok.txt", "plain/ok.txt"),
        ("bad\x01name", "bad\\x01name"),
        ("new\nline", "new\\x0aline"),
        ("del\x7f", "del\\x7f"),
        (os.fsdecode(b"\xff\xfe.bin"), "\\xff\\xfe.bin"),
        ("back\\slash", "back\\x5cslash"),
        ("été", "été"),
    ],
)
def test_escaped(name: str, shown: str) -> None:
    assert escaped(name) == shown
    escaped(name).encode("utf-8")  # always encodable


def test_outputs_with_control_characters_in_their_names_are_listed_escaped(client, settings, make_job) -> None:
    job = make_job("names", JobStatus.succeeded)
    work = settings.resolved_runs_dir / f"job_{job.id}" / "work"
    work.mkdir(parents=True)
    (work / "ok.txt").write_text("fine")
    (work / "bad\x01name.txt").write_text("b")
    with open(os.fsencode(work) + b"/\xff.bin", "wb") as f:
        f.write(b"x")
    r = client.get(f"/api/jobs/{job.id}/outputs")
    assert r.status_code == 200, r.text
    files = {f["path"]: f for f in r.json()["files"]}
    assert set(files) == {"ok.txt", "bad\\x01name.txt", "\\xff.bin"}
    assert files["ok.txt"]["downloadable"] and not files["bad\\x01name.txt"]["downloadable"]
    assert client.get(f"/api/jobs/{job.id}/outputs/file", params={"path": "ok.txt"}).content == b"fine"
