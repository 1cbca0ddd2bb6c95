"""The job page of a job with a code bundle (issue 9): its sha256 (short; full on hover and by Copy), size,
file count, the command a script job runs, and the file list loaded only when "Files" is opened; nothing
wider than a phone's screen. And the dashboard of a real script job using the SDK
(tests/scripts/projects/sdk_tutorial run by the web service's worker on 2 ranks): its loss chart has
points and its checkpoints are listed."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from core import bundles
from core.tables import JobStatus
from tests.support.browser import shot
from tests.support.deadlines import deadline_in
from tests.support.rows import insert_job
from tests.support.services import WebService

PROJECT = Path(__file__).parents[1] / "scripts" / "projects" / "sdk_tutorial"
PHONE = {"width": 390, "height": 844}
RUN_TIMEOUT_S = 240
LONG_PATH = "src/" + "a_rather_long_package_name/" * 4 + "module_with_an_unusually_long_file_name_for_wrapping.py"
WIDE = """() => {
  const w = window.innerWidth, out = [];
  for (const el of document.querySelectorAll('#job-code, #job-code *')) {
    const r = el.getBoundingClientRect();
    if (r.right > w + 0.5 && r.width > 0) out.push(`${el.tagName.toLowerCase()}#${el.id}.${el.className}`);
  }
  return {scrollWidth: document.documentElement.scrollWidth, innerWidth: w, out: out.slice(0, 8)};
}"""


def _upload(web_service: WebService, folder: Path) -> dict[str, Any]:
    packed = bundles.pack(folder, folder.parent / f"{folder.name}.tar.gz")
    with web_service.client() as client:
        r = client.post("/api/code", content=packed.archive.read_bytes(), headers={"Content-Type": "application/gzip"})
    assert r.status_code in (200, 201), r.text
    return r.json()


@pytest.fixture(scope="module")
def sdk_job(web_service: WebService, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A real script job with the SDK, run to the end by the web service's worker: (job, bundle)."""
    import time

    folder = tmp_path_factory.mktemp("code") / "sdk_tutorial"
    shutil.copytree(PROJECT, folder)
    bundle = _upload(web_service, folder)
    spec = {"name": "web-sdk-script", "code": f"sha256:{bundle['sha256']}", "entrypoint": "train.py --epochs 2",
            "nproc": 2, "device": "cpu"}  # fmt: skip
    with web_service.client() as client:
        job = client.post("/api/jobs", json=spec).raise_for_status().json()
        deadline = deadline_in(RUN_TIMEOUT_S)
        while job["status"] not in ("succeeded", "failed", "cancelled"):
            assert time.monotonic() < deadline, f"the script job did not finish in {RUN_TIMEOUT_S} s: {job}"
            time.sleep(0.5)
            job = client.get(f"/api/jobs/{job['id']}").raise_for_status().json()
        checkpoints = client.get(f"/api/jobs/{job['id']}/checkpoints").raise_for_status().json()
    assert job["status"] == "succeeded", job
    return {"job": job, "bundle": bundle, "checkpoints": checkpoints}


@pytest.fixture(scope="module")
def long_bundle(web_service: WebService, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A bundle with a long path in it, for the phone layout."""
    folder = tmp_path_factory.mktemp("code") / "long"
    (folder / LONG_PATH).parent.mkdir(parents=True)
    (folder / LONG_PATH).write_text("X = 1\n")
    (folder / "train.py").write_text("print('hello')\n")
    return _upload(web_service, folder)


def test_job_page_shows_the_bundle_and_lists_its_files_on_request(new_page, web_service, sdk_job) -> None:
    job, bundle = sdk_job["job"], sdk_job["bundle"]
    sha = bundle["sha256"]
    page = new_page(permissions=["clipboard-read", "clipboard-write"])
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/files" in r.url and "/api/code/" in r.url else None)
    page.goto(f"{web_service.base}/jobs/{job['id']}")
    page.wait_for_selector("#job-code:not([hidden])")

    code = page.locator("#code-sha")
    assert code.inner_text() == f"sha256:{sha[:12]}…"
    assert code.get_attribute("title") == f"sha256:{sha}"
    assert page.locator("#code-size").inner_text().endswith("compressed")
    assert page.locator("#code-count").inner_text() == str(bundle["files"]) == "1"
    assert page.locator("#code-command").inner_text() == "torchrun --nproc-per-node 2 train.py --epochs 2"

    # The file list is not fetched until asked for.
    assert page.locator("#code-files-table").is_hidden()
    assert not asked, asked
    page.click("#code-files summary")
    page.wait_for_selector("#code-files-table:not([hidden])")
    assert [u for u in asked if u.endswith(f"/api/code/{sha}/files")], asked
    rows = page.locator("#code-files-body tr")
    assert rows.count() == 1 and rows.first.locator("td").first.inner_text() == "train.py"
    assert page.locator("#code-files-status").inner_text().startswith("1 file, ")
    assert "global batch" not in page.locator("#job-facts").inner_text()  # the spec's default batch is not the script's

    page.click("#code-copy")
    page.wait_for_function("() => document.querySelector('#code-copied').textContent === 'Copied'")
    assert page.evaluate("() => navigator.clipboard.readText()") == f"sha256:{sha}"
    shot(page, "job-code-laptop")


def test_a_job_without_code_shows_no_bundle(page, web_service, db) -> None:
    plain = insert_job(db, "web-no-code", JobStatus.succeeded)
    page.goto(f"{web_service.base}/jobs/{plain.id}")
    page.wait_for_function("() => document.querySelector('#job-name').textContent === 'web-no-code'")
    assert page.locator("#job-code").is_hidden()


def test_bundle_on_a_phone_does_not_widen_the_page(new_page, web_service, db, long_bundle) -> None:
    entry = "train.py --data-root /a/very/long/path/to/somewhere/that/does/not/break/" + "nicely" * 8
    spec = {"name": "web-code-phone", "code": f"sha256:{long_bundle['sha256']}", "entrypoint": entry,
            "nproc": 4, "device": "cpu"}  # fmt: skip
    job = insert_job(db, "web-code-phone", JobStatus.succeeded, spec=spec)
    page = new_page(viewport=PHONE)
    page.goto(f"{web_service.base}/jobs/{job.id}")
    page.wait_for_selector("#job-code:not([hidden])")
    assert page.locator("#code-command").inner_text() == f"torchrun --nproc-per-node 4 {entry}"
    page.click("#code-files summary")
    page.wait_for_selector("#code-files-table:not([hidden])")
    paths = page.locator("#code-files-body tr td:first-child").all_inner_texts()
    assert sorted(paths) == sorted([LONG_PATH, "train.py"])
    found = page.evaluate(WIDE)
    shot(page, "job-code-phone")
    assert found["scrollWidth"] <= found["innerWidth"] and not found["out"], found


def test_sdk_script_job_shows_its_loss_chart_and_checkpoints(page, web_service, sdk_job) -> None:
    job, checkpoints = sdk_job["job"], sdk_job["checkpoints"]
    with web_service.client() as client:
        metrics = client.get(f"/api/jobs/{job['id']}/metrics", params={"name": "train/loss"}).json()
    (series,) = metrics["series"]
    assert len(series["points"]) == 16  # 2 epochs of 8 steps, one rankzero.log a step
    page.goto(f"{web_service.base}/jobs/{job['id']}")
    page.wait_for_function("() => Number(document.querySelector('#chart-loss').dataset.points) > 0")
    assert int(page.locator("#chart-loss").get_attribute("data-points")) == len(series["points"])
    page.wait_for_selector("#checkpoints-body tr")
    rows = page.locator("#checkpoints-body tr")
    assert rows.count() == len(checkpoints) > 0
    shown = {int(r.get_attribute("data-checkpoint-id")) for r in rows.all()}
    assert shown == {c["id"] for c in checkpoints}
    titles = set(page.locator("#checkpoints-body code.sha").evaluate_all("els => els.map(e => e.title)"))
    assert titles == {c["sha256"] for c in checkpoints}
    shot(page, "job-sdk-script")
