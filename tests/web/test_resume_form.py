"""*Resume from here* on a finished job: the form trains past the checkpoint (not 0 steps), warns as you
type when it would train 0 steps or change the global batch, and the server refuses such a submit."""

from __future__ import annotations

from tests.support.browser import allow_http_error, shot
from tests.support.rows import seed_checkpoint, seed_job


def test_resume_of_a_finished_job_trains_past_its_checkpoint_and_warns(new_page, web_service, db) -> None:
    job = seed_job(db, "resume-finished", "succeeded", runs_dir=web_service.runs_dir, total_steps=300,
                   spec={"batch_size": 16})  # fmt: skip
    ckpt = seed_checkpoint(db, job, 300)
    page = new_page(viewport={"width": 1440, "height": 900})
    page.goto(f"{web_service.base}/new?resume={ckpt.id}")
    page.wait_for_selector("#job-form[data-ready]")
    assert page.locator("#f-max-steps").input_value() == "600"  # as long again as the original run
    assert "300 more steps" in page.locator(".alert-info").inner_text()
    assert page.locator("#resume-warning").is_hidden()

    page.fill("#f-max-steps", "300")
    page.wait_for_selector("#resume-warning:visible")
    assert "0 steps" in page.locator("#resume-warning").inner_text()
    page.fill("#f-batch-size", "8")
    page.wait_for_function("() => document.querySelector('#resume-warning').textContent.includes('global batch 16')")
    shot(page, "resume-warnings", full_page=False)  # the sticky submit bar with its warning

    allow_http_error(page, 422, "/api/jobs")
    page.fill("#f-batch-size", "16")
    page.click("#submit-job")
    page.wait_for_selector("#form-errors:visible")
    assert "0 steps" in page.locator("#form-errors").inner_text()

    page.fill("#f-max-steps", "450")
    assert page.locator("#resume-warning").is_hidden()
    page.click("#submit-job")
    page.wait_for_url("**/jobs/*")
    new_id = page.url.rstrip("/").rsplit("/", 1)[-1]
    with web_service.client() as api:  # nothing to train here (the seeded checkpoint is empty)
        api.post(f"/api/jobs/{new_id}/cancel")
