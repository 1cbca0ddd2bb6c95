"""The new-job page: a form from the JSON Schema, the global batch as you type, the raw
JSON/YAML editor, and 422 errors shown at the field their loc names."""

from __future__ import annotations

from tests.support.browser import allow_http_error, shot


def test_validation_errors_are_shown_at_their_field(page, web_service) -> None:
    page.goto(f"{web_service.base}/new")
    page.wait_for_selector("#job-form[data-ready]")
    # Strategy knobs: the global batch follows as you type.
    page.fill("#f-batch-size", "8")
    page.fill("#f-accumulation-steps", "3")
    page.fill("#f-nproc", "2")
    assert page.locator("#global-batch").inner_text() == "48"
    shot(page, "new-job", full_page=False)  # the sticky submit bar sits mid-page in a full-page shot
    page.locator("#f-nproc").scroll_into_view_if_needed()
    shot(page, "new-job-strategy", full_page=False)

    allow_http_error(page, 422, "/api/jobs")
    page.fill("#f-name", "bad-lr")
    page.fill("#f-optimizer-lr", "0")
    page.click("#submit-job")
    error = page.locator("#f-optimizer-lr-error")
    error.wait_for(state="visible")
    assert "greater than 0" in error.inner_text()
    assert page.locator("#f-optimizer-lr").get_attribute("aria-invalid") == "true"
    assert page.evaluate("() => document.activeElement.id") == "f-optimizer-lr"
    assert "optimizer.lr" in page.locator("#form-errors").inner_text()
    shot(page, "new-job-validation-error", full_page=False)
    assert page.url.endswith("/new")  # nothing was submitted


def test_raw_yaml_editor_round_trips_and_reports_unknown_fields(page, web_service) -> None:
    page.goto(f"{web_service.base}/new")
    page.wait_for_selector("#job-form[data-ready]")
    allow_http_error(page, 422, "/api/jobs")
    allow_http_error(page, 400, "/ui/parse-spec")
    page.click("#tab-raw")
    assert '"model"' in page.locator("#raw-spec").input_value()  # the form's spec as JSON
    page.fill(
        "#raw-spec",
        "name: yaml-job\nmodel: {name: mlp}\ndata:\n  name: digits\nmax_steps: 5\nbatch_size: 4\nnproc: 3\n"
        "bogus_field: 1\n",
    )
    page.click("#submit-job")
    page.locator("#form-errors").wait_for(state="visible")
    assert "bogus_field" in page.locator("#form-errors").inner_text()
    shot(page, "new-job-yaml-error")
    # Not YAML at all: the parser's message, with its line.
    page.fill("#raw-spec", "name: [unclosed\n")
    page.click("#tab-form")
    page.locator("#raw-error").wait_for(state="visible")
    assert "line" in page.locator("#raw-error").inner_text()
    # Back to the form: the YAML's values are in the fields.
    page.fill("#raw-spec", "name: from-yaml\nmax_steps: 7\nbatch_size: 4\nnproc: 3\n")
    page.click("#tab-form")
    page.locator("#panel-form").wait_for(state="visible")
    assert page.locator("#f-name").input_value() == "from-yaml"
    assert page.locator("#global-batch").inner_text() == "12"
