"""The job page says what the console reader read (issue 36), in chromium against the real service: a script
job's recognised series and a line they came from; a job whose console had numbers but no names says how many
lines it read, suggests a pattern from the commonest numeric line, and its button adds the pattern to the
finished job, whose curve is then drawn."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.support.browser import shot
from tests.support.services import WebService

pytestmark = pytest.mark.browser
RANKZERO = str(Path(sys.executable).with_name("rankzero"))
PRINTER = Path(__file__).parent / "projects" / "printer"


def _submit(web_service: WebService, folder: Path, mode: str) -> int:
    """`rankzero submit --code FOLDER` of the printer in `mode`; the job's id."""
    spec = folder.parent / f"{mode}.yaml"
    spec.write_text(yaml.safe_dump({"name": f"console-{mode}", "entrypoint": f"train.py {mode}", "nproc": 1}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RANKZERO_")}
    env |= {"RANKZERO_URL": web_service.base, "RANKZERO_API_TOKEN": web_service.token, "COLUMNS": "200",
            "XDG_CACHE_HOME": str(folder.parent / "cache")}  # fmt: skip
    r = subprocess.run([RANKZERO, "submit", "--code", str(folder), str(spec)], env=env, capture_output=True, text=True,
                       timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    return int(r.stdout.split("job ", 1)[1].split()[0])


def _finished(web_service: WebService, job_id: int) -> dict:
    deadline = time.monotonic() + 240
    with web_service.client() as client:
        while time.monotonic() < deadline:
            job = client.get(f"/api/jobs/{job_id}").raise_for_status().json()
            if job["status"] in ("succeeded", "failed", "cancelled"):
                return job
            time.sleep(0.5)
    raise AssertionError(f"job {job_id} did not end within 240 s")


def test_the_console_note_and_a_suggested_pattern_that_draws_a_finished_jobs_curve(
    new_page, web_service: WebService, tmp_path: Path
) -> None:
    folder = shutil.copytree(PRINTER, tmp_path / "printer")
    named, bare = _submit(web_service, folder, "nanogpt"), _submit(web_service, folder, "bare")
    assert _finished(web_service, named)["status"] == "succeeded"
    assert _finished(web_service, bare)["status"] == "succeeded"

    page = new_page()
    page.goto(f"{web_service.base}/jobs/{named}")
    note = page.locator("#console-note")
    note.wait_for(state="visible")
    text = note.inner_text()
    assert text.startswith("From the console: loss, time, mfu, train loss, val loss from lines like "), text
    assert note.locator("code").inner_text().startswith("iter ")
    shot(page, "console-note-recognised")

    page.goto(f"{web_service.base}/jobs/{bare}")
    note.wait_for(state="visible")
    assert note.inner_text().startswith("No metrics recognised in 25 lines of the console."), note.inner_text()
    assert note.locator("code").first.inner_text() == "0 1.0000 done"
    assert page.locator("#chart-metric").count() == 0  # (the system charts are there)
    shot(page, "console-note-suggestion")
    page.get_by_role("button", name="Read it as a metric").click()
    page.locator("#chart-metric").wait_for(state="visible")  # the suggested pattern's curve, drawn
    page.wait_for_function(
        "() => /^From the console: metric from lines like/.test(document.querySelector('#console-note').textContent)"
    )
    assert "metric" in page.locator("#chart-metric figcaption").inner_text()
    shot(page, "console-note-applied")
