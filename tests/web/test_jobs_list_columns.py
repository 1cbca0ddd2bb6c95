"""The jobs list's optional columns (a spec parameter, a metric's latest value) and its sortable headers
(issue 24), in the browser: added, sorted both ways by clicking, kept in the URL, removed."""

from __future__ import annotations

from core.tables import MetricPoint
from tests.support.browser import shot
from tests.support.rows import seed_job


def _order(page) -> list[str]:
    return page.locator("#jobs-body tr td.name a").all_inner_texts()


def _wait_order(page, names: list[str]) -> None:
    """Until the rows read `names` in this order (a poll may still show the previous order for a moment)."""
    want = ",".join(names)
    page.wait_for_function(
        "() => Array.from(document.querySelectorAll('#jobs-body tr td.name a')).map(a => a.textContent).join()"
        f" === {want!r}"
    )


def test_parameter_and_metric_columns_sort_the_list(page, web_service, db) -> None:
    made = {}
    for name, lr, acc in (("lr-mid", 0.01, 0.7), ("lr-high", 0.1, 0.9), ("lr-low", 0.001, 0.5)):
        job = seed_job(db, name, "succeeded", runs_dir=web_service.runs_dir, spec={"params": {"lr": lr}})
        db.add(MetricPoint(job_id=job.id, seq=1, step=1, name="val/acc", value=acc, time=1.0))
        made[name] = job
    db.commit()

    page.goto(f"{web_service.base}/?name=lr-")
    _wait_order(page, ["lr-low", "lr-high", "lr-mid"])  # newest first
    page.select_option("#column-kind", "param")
    page.fill("#column-name", "lr")
    page.click("#add-column")
    page.select_option("#column-kind", "metric")
    page.fill("#column-name", "val/acc")
    page.press("#column-name", "Enter")
    page.wait_for_function("() => document.querySelectorAll('#jobs-head th.extra').length === 2")
    filled = "() => (document.querySelector('#jobs-body tr td.extra:last-child')?.textContent || '') !== ''"
    page.wait_for_function(filled)
    row = page.locator(f"tr[data-job-id='{made['lr-high'].id}']")
    assert row.locator("td.extra").all_inner_texts() == ["0.1", "0.9"]

    page.click("#jobs-head th[data-sort='param:lr'] button.sort")
    _wait_order(page, ["lr-low", "lr-mid", "lr-high"])
    assert page.locator("#jobs-head th[data-sort='param:lr']").get_attribute("aria-sort") == "ascending"
    page.click("#jobs-head th[data-sort='metric:val/acc'] button.sort")
    page.wait_for_function("() => location.search.includes('sort=metric')")
    page.click("#jobs-head th[data-sort='metric:val/acc'] button.sort")  # again: the other way
    page.wait_for_function("() => location.search.includes('sort=-metric')")
    _wait_order(page, ["lr-high", "lr-mid", "lr-low"])
    assert "sort=-metric%3Aval%2Facc" in page.url and "col=param%3Alr" in page.url
    shot(page, "jobs-list-columns")

    page.reload()  # the columns and the order come back from the URL
    page.wait_for_function("() => document.querySelectorAll('#jobs-head th.extra').length === 2")
    _wait_order(page, ["lr-high", "lr-mid", "lr-low"])
    page.click("#jobs-head th[data-sort='metric:val/acc'] button.remove-column")  # its sort goes with it
    page.wait_for_function("() => document.querySelectorAll('#jobs-head th.extra').length === 1")
    _wait_order(page, ["lr-low", "lr-high", "lr-mid"])  # newest first again
    assert "sort=" not in page.url
