"""*Clone & edit* of a job with its own packages: the form carries the source's lock (environment.lock_from),
the page says so, and the submitted clone keeps it (issue 28; worker side: tests/environments)."""

from __future__ import annotations

from tests.support.rows import seed_job


def test_clone_and_edit_keeps_the_sources_locked_packages(new_page, web_service, db) -> None:
    from core.tables import JobEnvironment

    source = seed_job(db, "own-packages", "succeeded", runs_dir=web_service.runs_dir,
                      spec={"environment": {"packages": ["six"]}})  # fmt: skip
    assert source.id is not None
    db.add(JobEnvironment(job_id=source.id, input_hash="x", lock="six==1.16.0\n", state="ready",
                          packages=[{"name": "six", "version": "1.16.0"}]))  # fmt: skip
    db.commit()
    page = new_page(viewport={"width": 1440, "height": 900})
    page.goto(f"{web_service.base}/new?clone={source.id}")
    page.wait_for_selector("#job-form[data-ready]")
    assert f"keep the versions job #{source.id} locked" in page.locator(".alert-info").inner_text()
    page.click("#submit-job")
    page.wait_for_url("**/jobs/*")
    new_id = page.url.rstrip("/").rsplit("/", 1)[-1]
    with web_service.client() as api:
        spec = api.get(f"/api/jobs/{new_id}").json()["spec"]
        assert spec["environment"]["lock_from"] == source.id and spec["environment"]["packages"] == ["six"]
        api.post(f"/api/jobs/{new_id}/cancel")
