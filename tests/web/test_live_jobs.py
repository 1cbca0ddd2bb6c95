"""End to end through the real worker and torchrun: submit through the form, watch the page
reach succeeded with drawn charts, download a checkpoint, cancel a running job."""

from __future__ import annotations

import hashlib
from pathlib import Path

from tests.support.browser import shot

RUN_TIMEOUT_MS = 120_000


def test_submit_through_the_form_watch_it_succeed_and_download_a_checkpoint(page, web_service, tmp_path: Path) -> None:
    page.goto(f"{web_service.base}/new")
    page.wait_for_selector("#job-form[data-ready]")
    page.select_option("#preset", "digits-mlp")
    page.fill("#f-name", "e2e-form-digits")
    page.fill("#f-max-steps", "60")
    page.fill("#f-eval-every", "20")
    page.fill("#f-log-every", "5")
    page.fill("#f-checkpoint-every-steps", "30")
    page.select_option("#f-device", "cpu")
    with page.expect_navigation():
        page.click("#submit-job")
    assert "/jobs/" in page.url
    page.wait_for_function(
        "() => document.querySelector('#job-status').textContent === 'succeeded'", timeout=RUN_TIMEOUT_MS
    )
    page.wait_for_function("() => Number(document.querySelector('#chart-loss')?.dataset.points) > 5")
    page.wait_for_function("() => Number(document.querySelector('#chart-acc')?.dataset.points) > 0")
    page.wait_for_selector("#checkpoints-body tr")
    # The timeline is re-read 200 ms (debounced) after the status event that turned the badge green.
    page.wait_for_function("() => document.querySelectorAll('#job-timeline li').length >= 4")
    assert page.locator("#job-timeline li").count() >= 4
    shot(page, "job-live-succeeded")

    row = page.locator("#checkpoints-body tr").first
    expected_sha = row.locator("code.sha").get_attribute("title")
    with page.expect_download() as info:
        row.locator("text=Download").click()
    target = tmp_path / "ckpt.pt"
    info.value.save_as(target)
    assert hashlib.sha256(target.read_bytes()).hexdigest() == expected_sha


def test_cancel_a_running_job(page, web_service) -> None:
    spec = {
        "name": "e2e-cancel-me",
        "model": {"name": "mlp"},
        "data": {"name": "digits"},
        "device": "cpu",
        "max_steps": 1_000_000,
        "batch_size": 8,
        "log_every": 5,
    }
    with web_service.client() as client:
        job = client.post("/api/jobs", json=spec).raise_for_status().json()
    page.goto(f"{web_service.base}/jobs/{job['id']}")
    page.wait_for_function(
        "() => document.querySelector('#job-status').textContent === 'running'", timeout=RUN_TIMEOUT_MS
    )
    page.wait_for_function("() => Number(document.querySelector('#chart-loss')?.dataset.points) > 0", timeout=60_000)
    shot(page, "job-live-running")
    page.click("#cancel-job")
    page.wait_for_function("() => document.querySelector('#job-status').textContent === 'cancelled'", timeout=60_000)
    assert page.locator("#cancel-job").is_hidden()
    shot(page, "job-live-cancelled")
