"""The job page's code panel says what `rankzero submit --code` left out of the upload (issue 27;
web/static/js/code_left_out.js, fed by GET /api/code/{sha}/left-out): every file the ignore files dropped,
largest first, with the ignore file, line and pattern that dropped it; a job whose upload left nothing out
shows no such table. The bundles go up through the real CLI (which packs, uploads and PUTs the record),
and the page is read in chromium."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.browser import shot
from tests.support.services import WebService

RANKZERO = str(Path(sys.executable).with_name("rankzero"))


def _submit_code(web_service: WebService, folder: Path, name: str) -> dict:
    """`rankzero submit --code FOLDER` of a script job; the job as the API then reads it."""
    spec = folder.parent / f"{name}.yaml"
    spec.write_text(yaml.safe_dump({"name": name, "entrypoint": "train.py", "nproc": 1, "device": "cpu"}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RANKZERO_")}
    env |= {"RANKZERO_URL": web_service.base, "RANKZERO_API_TOKEN": web_service.token, "COLUMNS": "200",
            "XDG_CACHE_HOME": str(folder.parent / "cache")}  # fmt: skip
    r = subprocess.run([RANKZERO, "submit", "--code", str(folder), str(spec)], env=env, capture_output=True, text=True,
                       timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    job_id = int(r.stdout.split("job ", 1)[1].split()[0])
    with web_service.client() as client:
        return client.get(f"/api/jobs/{job_id}").raise_for_status().json()


@pytest.fixture(scope="module")
def left_out_job(web_service: WebService, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A folder whose .gitignore drops two *.bin files (the larger one sorts last by name) and a *.pkl."""
    folder = tmp_path_factory.mktemp("left-out") / "project"
    (folder / "data").mkdir(parents=True)
    (folder / "train.py").write_text("print('hello')\n")
    (folder / ".gitignore").write_text("# prepared data\n*.bin\n*.pkl\n")
    (folder / "a_small.bin").write_bytes(b"s" * 1000)
    (folder / "data" / "z_big.bin").write_bytes(b"b" * 5000)
    (folder / "data" / "meta.pkl").write_bytes(b"m" * 300)
    return _submit_code(web_service, folder, "web-left-out")


@pytest.fixture(scope="module")
def complete_job(web_service: WebService, tmp_path_factory: pytest.TempPathFactory) -> dict:
    folder = tmp_path_factory.mktemp("complete") / "project"
    folder.mkdir()
    (folder / "train.py").write_text("print('all here')\n")
    (folder / ".gitignore").write_text("*.bin\n")  # nothing it matches
    return _submit_code(web_service, folder, "web-nothing-left-out")


def test_the_code_panel_lists_what_the_upload_left_out_largest_first(new_page, web_service, left_out_job) -> None:
    page = new_page()
    page.goto(f"{web_service.base}/jobs/{left_out_job['id']}")
    page.wait_for_selector("#code-left-out:not([hidden])")
    rows = [r.locator("td").all_inner_texts() for r in page.locator("#code-left-out-body tr").all()]
    assert rows == [
        ["data/z_big.bin", "4.9 KiB", ".gitignore line 2 *.bin"],
        ["a_small.bin", "1000 B", ".gitignore line 2 *.bin"],
        ["data/meta.pkl", "300 B", ".gitignore line 3 *.pkl"],
    ]
    # The path and the pattern are code, as typed; the sizes in one column, right-aligned.
    assert page.locator("#code-left-out-body tr").first.locator("td code").all_inner_texts() == [
        "data/z_big.bin", "*.bin"]  # fmt: skip
    assert page.locator("#code-left-out-body td.num").count() == 3
    status = page.locator("#code-left-out-status")
    assert status.inner_text().startswith("3 files, 6.2 KiB. A line !PATTERN in .rankzeroignore"), status.inner_text()
    assert "`" not in status.inner_text()  # what to type shows as code, not as backticks
    assert status.locator("code").all_inner_texts() == ["!PATTERN", ".rankzeroignore", "rankzero submit --include GLOB"]
    assert page.locator("#code-left-out-h").inner_text() == "Left out of the upload"
    shot(page, "job-code-left-out")


def test_a_job_whose_upload_left_nothing_out_shows_no_such_table(new_page, web_service, complete_job) -> None:
    page = new_page()
    with page.expect_response(lambda r: r.url.endswith("/left-out")) as answered:
        page.goto(f"{web_service.base}/jobs/{complete_job['id']}")
    assert answered.value.status == 200 and answered.value.json() == []
    page.wait_for_selector("#job-code:not([hidden])")
    page.wait_for_function("() => document.querySelector('#code-left-out-body') !== null")
    assert page.locator("#code-left-out").is_hidden()
    assert page.locator("#code-left-out-body tr").count() == 0
