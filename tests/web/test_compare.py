"""Issue 11's compare page at a laptop (1440×900) and a phone (390×844): runs picked from a searchable
list (no typed ids), any metric they logged, the x axis by samples seen, Okabe–Ito colours, a table of
results and only the settings that differ, and honest empty states. No sideways scroll, no console
error (the `new_page` fixture). Screenshots: test-output/screenshots/compare-*."""

from __future__ import annotations

import pytest

from tests.support.browser import shot
from tests.support.rows import seed_curves, seed_job
from tests.web.test_layout_sizes import SIZES, WIDE


@pytest.fixture(scope="module")
def compare_jobs(web_service):
    from sqlmodel import Session

    from core.db import get_engine

    with Session(get_engine(web_service.database_url)) as db:
        a = seed_job(db, "cmpx-small-batch", "succeeded", runs_dir=web_service.runs_dir, total_steps=800,
                     spec={"batch_size": 16})  # fmt: skip
        b = seed_job(db, "cmpx-big-batch", "succeeded", runs_dir=web_service.runs_dir, total_steps=400,
                     spec={"batch_size": 64, "optimizer": {"name": "sgd", "lr": 0.2}})  # fmt: skip
        seed_curves(db, a, 800)
        seed_curves(db, b, 400)
        empty = seed_job(db, "cmpx-no-metrics", "failed", runs_dir=web_service.runs_dir, total_steps=400, step=0)
        return {"a": a.id, "b": b.id, "empty": empty.id}


@pytest.mark.parametrize("size", list(SIZES))
def test_compare_runs_picked_from_a_list(new_page, web_service, compare_jobs, size) -> None:
    page = new_page(viewport=SIZES[size])
    page.goto(f"{web_service.base}/compare")
    page.wait_for_selector("#compare-message:not([hidden])")
    assert "Pick runs" in page.locator("#compare-message").inner_text()
    assert page.locator("#compare-chart").is_hidden()

    page.fill("#run-search", "cmpx-")
    page.wait_for_function("() => document.querySelectorAll('#run-list li').length === 3")
    page.click(f"label[for='pick-{compare_jobs['a']}']")
    page.click(f"label[for='pick-{compare_jobs['b']}']")
    page.wait_for_function("() => /2 runs/.test(document.querySelector('#compare-title').textContent)")
    page.wait_for_selector("#compare-chart[data-points]")
    assert page.locator("#compare-title").inner_text() == "train/loss by step: 2 runs"
    assert (
        f"ids={compare_jobs['a']}%2C{compare_jobs['b']}" in page.url
        or f"ids={compare_jobs['a']},{compare_jobs['b']}" in page.url
    )
    # Okabe–Ito blue, then vermillion.
    colours = page.locator("#compare-chart .legend-swatch").evaluate_all("els => els.map(e => e.style.borderColor)")
    assert colours == ["rgb(0, 114, 178)", "rgb(213, 94, 0)"]
    # Only what differs, after the results.
    params = page.locator("#params-body th").all_inner_texts()
    assert {"batch_size", "optimizer.lr", "max_steps"} <= set(params), params
    assert "model.name" not in params and "optimizer.name" not in params

    # A drag-zoom re-reads each run's points in the visible range.
    over = page.locator("#compare-chart .u-over")
    over.scroll_into_view_if_needed()
    box = over.bounding_box()
    with page.expect_response(lambda r: "/metrics" in r.url and "start_step" in r.url):
        page.mouse.move(box["x"] + box["width"] * 0.2, box["y"] + 30)
        page.mouse.down()
        page.mouse.move(box["x"] + box["width"] * 0.4, box["y"] + 30, steps=4)
        page.mouse.up()
    page.wait_for_selector("#compare-chart[data-zoomed]")
    page.locator("#compare-chart .u-over").dblclick()
    page.wait_for_function("() => !document.querySelector('#compare-chart').dataset.zoomed")

    # Any metric they logged; x by samples seen (step × global batch) so the batch sizes line up.
    page.wait_for_function(
        "() => [...document.querySelectorAll('#compare-metric option')].some(o => o.value === 'val/loss')"
    )
    page.select_option("#compare-metric", "val/loss")
    page.select_option("#compare-x", "samples")
    page.wait_for_function(
        "() => document.querySelector('#compare-title').textContent === 'val/loss by samples seen: 2 runs'"
    )
    assert "global batch" in page.locator("#compare-x-note").inner_text()
    latest = page.locator("#compare-chart .legend-latest").all_inner_texts()
    assert "25.6k samples" in latest[1] and "12.8k samples" in latest[0], latest  # 400 × 64, 800 × 16
    assert page.locator("#params-body tr.result-row").count() == 4

    # A run without the metric is named, not silently dropped.
    page.click(f"label[for='pick-{compare_jobs['empty']}']")
    page.wait_for_function("() => /logged no val\\/loss/.test(document.querySelector('#compare-message').textContent)")
    assert f"#{compare_jobs['empty']}" in page.locator("#compare-message").inner_text()
    found = page.evaluate(WIDE)
    shot(page, f"compare-{size}")
    assert found["scrollWidth"] <= found["innerWidth"], found
