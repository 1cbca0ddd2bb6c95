"""Pages over seeded rows (no training run): job page parts, jobs list, compare, a failed job's
banner, and a million-point series drawn from its rollups (the time it takes: bench/ui_charts.py)."""

from __future__ import annotations

import time

from tests.support.browser import shot
from tests.support.rows import bulk_points, seed_checkpoint, seed_curves, seed_job, seed_logs


def test_job_page_shows_timeline_charts_checkpoints_and_logs(page, web_service, db) -> None:
    job = seed_job(
        db,
        "seeded-ddp",
        "succeeded",
        runs_dir=web_service.runs_dir,
        total_steps=2000,
        spec={"nproc": 4, "accumulation_steps": 2, "batch_size": 16},
    )
    seed_curves(db, job, 2000)
    ckpt = seed_checkpoint(db, job, 1000)
    seed_checkpoint(db, job, 2000)
    seed_logs(job, ranks=4)

    page.goto(f"{web_service.base}/jobs/{job.id}")
    page.wait_for_selector("#chart-loss[data-points]")
    page.wait_for_function("() => document.querySelectorAll('#checkpoints-body tr').length === 2")
    page.wait_for_function("() => document.querySelector('#log-text').textContent.includes('[rank 0]')")
    assert page.locator("#job-status").inner_text() == "succeeded"
    assert "DDP 4 × acc 2" in page.locator("#job-facts").inner_text()
    assert page.locator("#job-timeline li").count() == 4
    assert int(page.locator("#chart-loss").get_attribute("data-points")) > 1000
    assert int(page.locator("#chart-acc").get_attribute("data-points")) == 40
    assert page.locator("#log-rank option").count() == 5  # "all, merged" (the default view) and the 4 ranks
    # The merged console (issue 22): every rank's lines, each with its rank prefix.
    merged = page.locator("#log-text").text_content() or ""
    assert "[r0] rank 0 ready" in merged and "[r3 err] [rank 3] step   990" in merged, merged[-300:]
    shot(page, "job-succeeded")

    # Zoom: drag across the loss chart → every chart re-asks for the visible steps.
    over = page.locator("#chart-loss .u-over")
    over.scroll_into_view_if_needed()
    box = over.bounding_box()
    with page.expect_response(lambda r: "/metrics" in r.url and "start_step" in r.url):
        page.mouse.move(box["x"] + box["width"] * 0.4, box["y"] + 40)
        page.mouse.down()
        page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + 40, steps=5)
        page.mouse.up()
    page.wait_for_selector("#chart-acc[data-zoomed]")
    page.check("#log-scale")
    page.wait_for_selector("#chart-loss .u-over")
    shot(page, "job-zoomed-log")
    page.click("#reset-zoom")
    page.wait_for_function("() => !document.querySelector('#chart-loss').dataset.zoomed")

    # Rank 2's stdout.
    page.select_option("#log-rank", "2")
    page.select_option("#log-stream", "stdout")
    page.wait_for_function("() => document.querySelector('#log-text').textContent.includes('rank 2 ready')")

    # "Resume from here" opens the form pre-filled with resume_from = the checkpoint's key (the same on every host).
    page.click(f"tr[data-checkpoint-id='{ckpt.id}'] >> text=Resume from here")
    page.wait_for_selector("#job-form[data-ready]")
    resume = page.locator("#f-resume-from").input_value()
    assert resume == f"job_{job.id}/checkpoints/step_00001000.pt"
    assert page.locator("#f-nproc").input_value() == "4"
    assert page.locator("#global-batch").inner_text() == "128"


def test_failed_job_shows_error_and_rank_at_the_top(page, web_service, db) -> None:
    job = seed_job(
        db,
        "seeded-failure",
        "failed",
        runs_dir=web_service.runs_dir,
        total_steps=500,
        step=120,
        error=(
            'RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (rank 1)\n  File "trainer/loop.py", line 88'
        ),
        failed_rank=1,
        exit_code=1,
        spec={"nproc": 2},
    )
    seed_curves(db, job, 120)
    seed_logs(job, ranks=2)
    page.goto(f"{web_service.base}/jobs/{job.id}")
    page.wait_for_selector("#job-error:not([hidden])")
    assert "rank 1" in page.locator("#job-error-title").inner_text()
    # The cause in one line; the traceback folded beneath it.
    assert page.locator("#job-error-cause").inner_text().startswith("RuntimeError: CUDA out of memory")
    assert not page.locator("#job-traceback").evaluate("d => d.open")
    assert "out of memory" in page.locator("#job-error-text").text_content()
    assert page.locator("#cancel-job").is_hidden()
    # The failing rank's log, opened at its end, right under the failure.
    assert page.locator("#log-rank").input_value() == "1"
    page.wait_for_function("() => document.querySelector('#log-text').textContent.includes('[rank 1] step   990')")
    at_end = "() => { const p = document.querySelector('#log-text'); return p.scrollTop > 0 && "
    page.wait_for_function(at_end + "p.scrollTop + p.clientHeight >= p.scrollHeight - 2; }")
    assert page.evaluate("() => document.querySelector('#job-error').nextElementSibling.id") == "logs-card"
    # A finished job leads with its result: no progress bar, no ETA.
    assert page.locator("#job-progress-row").is_hidden()
    assert "ETA" not in page.locator("#job-stats").inner_text()
    shot(page, "job-failed")


def test_jobs_list_filters_pages_and_compare(page, web_service, db) -> None:
    a = seed_job(db, "cmp-single", "succeeded", runs_dir=web_service.runs_dir, total_steps=600, spec={"batch_size": 32})
    b = seed_job(
        db,
        "cmp-ddp2-acc2",
        "succeeded",
        runs_dir=web_service.runs_dir,
        total_steps=600,
        spec={"batch_size": 16, "nproc": 2, "accumulation_steps": 2},
    )
    seed_curves(db, a, 600)
    seed_curves(db, b, 600)
    running = seed_job(
        db, "list-running", "running", runs_dir=web_service.runs_dir, total_steps=5000, step=1800, spec={"nproc": 2}
    )
    for i in range(28):
        seed_job(db, f"filler-{i:02d}", "queued", runs_dir=web_service.runs_dir)

    page.goto(f"{web_service.base}/")
    page.wait_for_selector("#jobs-table[data-loaded]")
    assert page.locator("#jobs-body tr").count() == 25
    assert "of" in page.locator("#page-info").inner_text()
    shot(page, "jobs-list")
    page.click("#page-next")
    page.wait_for_function("() => document.querySelector('#page-info').textContent.startsWith('26')")

    page.select_option("#filter-status", "running")
    row = page.locator(f"tr[data-job-id='{running.id}']")
    row.wait_for()
    assert "DDP 2" in row.inner_text() and "1,800 / 5,000" in row.inner_text()
    page.select_option("#filter-status", "")
    page.fill("#filter-name", "cmp-")
    page.wait_for_function("() => document.querySelectorAll('#jobs-body tr').length === 2")
    page.check(f"tr[data-job-id='{a.id}'] input.pick")
    page.check(f"tr[data-job-id='{b.id}'] input.pick")
    page.wait_for_timeout(2300)  # a poll later the ticks are still there
    assert page.locator("input.pick:checked").count() == 2
    page.click("#compare-selected")
    page.wait_for_url(f"**/compare?ids={a.id},{b.id}")
    page.wait_for_selector("#compare-chart[data-points]")
    assert page.locator("#compare-jobs li").count() == 2
    shot(page, "compare")


def test_a_million_point_series_is_drawn_from_a_bounded_downsample(page, web_service, db) -> None:
    from core import metric_rollup

    job = seed_job(db, "million-points", "succeeded", runs_dir=web_service.runs_dir, total_steps=1_000_000)
    t0 = time.monotonic()
    bulk_points(db, job.id, "train/loss", 1_000_000)
    inserted = time.monotonic() - t0
    # The worker folds points into the downsampling rollups as it ingests; do the same here.
    metric_rollup.refresh(db, job.id)
    t1 = time.monotonic()
    page.goto(f"{web_service.base}/jobs/{job.id}")
    page.wait_for_selector("#chart-loss[data-first-draw-ms]", timeout=10_000)
    wall = time.monotonic() - t1
    draw_ms = float(page.locator("#chart-loss").get_attribute("data-first-draw-ms"))
    points = int(page.locator("#chart-loss").get_attribute("data-points"))
    fetch_ms = page.evaluate("""() => Math.max(...performance.getEntriesByType('resource')
        .filter((e) => e.name.includes('/metrics') && e.name.includes('train%2Floss')).map((e) => e.duration))""")
    nav = page.evaluate(
        "() => { const n = performance.getEntriesByType('navigation')[0]; "
        "return [n.responseStart, n.responseEnd, n.domContentLoadedEventEnd]; }"
    )
    print(f"\nnavigation: first byte {nav[0]:.0f} ms, HTML done {nav[1]:.0f} ms, DOMContentLoaded {nav[2]:.0f} ms")
    print(
        f"1M points: insert {inserted:.1f}s; first chart draw {draw_ms:.0f} ms after navigation "
        f"({wall * 1000:.0f} ms wall incl. page load; the metrics request took {fetch_ms:.0f} ms), "
        f"{points} points drawn"
    )
    # The mechanism that keeps the draw fast whatever the load: the page asks for a bounded downsample,
    # served from the min/max rollups, never the million points (timings: bench/ui_charts.py).
    assert 1000 <= points <= 4000
    series = web_service.client().get(f"/api/jobs/{job.id}/metrics", params={"name": "train/loss"}).json()["series"]
    assert series[0]["downsampled"] and series[0]["total_points"] == 1_000_000
    shot(page, "job-million-points")


def test_pages_fit_a_small_laptop_screen(new_page, web_service, db) -> None:
    job = seed_job(
        db,
        "laptop-view-with-a-rather-long-name",
        "running",
        runs_dir=web_service.runs_dir,
        total_steps=800,
        spec={"nproc": 2, "accumulation_steps": 4},
    )
    seed_curves(db, job, 400)
    page = new_page(viewport={"width": 1024, "height": 640})
    for path, ready, name in [
        ("/", "#jobs-table[data-loaded]", "laptop-jobs"),
        (f"/jobs/{job.id}", "#chart-loss[data-points]", "laptop-job"),
        ("/new", "#job-form[data-ready]", "laptop-new"),
    ]:
        page.goto(f"{web_service.base}{path}")
        page.wait_for_selector(ready)
        overflow = page.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert overflow <= 0, f"{path} scrolls sideways by {overflow}px at 1024 px"
        shot(page, name, full_page=False)
