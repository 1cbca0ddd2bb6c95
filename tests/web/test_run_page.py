"""Issue 11's run page and hosts view at a laptop (1440×900) and a phone (390×844), over seeded rows:
a finished job leads with its final and best val/* values and its configuration (what differs first);
charts are smoothed, their cursors linked, their legends show the (snapped) value under the cursor
and the latest; logs can be searched and downloaded; a queued job says why it waits; an elastic job
says on how many ranks it runs; /hosts lists GPUs and slots used/free, jobs per host, a dead host
greyed. Every page: no sideways scroll, no console error (the `new_page` fixture). Screenshots:
test-output/screenshots/run-*."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.support.browser import shot
from tests.support.rows import seed_curves, seed_job, seed_logs
from tests.web.test_layout_sizes import SIZES, WIDE

NOWHERE = "web-test-no-worker"  # a pool no host serves: the seeded queued job stays queued
HOSTS_POOL = "web-test-hosts"  # the seeded hosts' pool (no job is submitted to it)


@pytest.fixture(scope="module")
def run_jobs(web_service):
    from sqlmodel import Session

    from core.db import get_engine
    from core.tables import Host

    with Session(get_engine(web_service.database_url)) as db:
        done = seed_job(db, "run-page-done", "succeeded", runs_dir=web_service.runs_dir, total_steps=2000,
                        spec={"batch_size": 16, "optimizer": {"name": "adamw", "lr": 0.001}})  # fmt: skip
        seed_curves(db, done, 2000)
        seed_logs(done, ranks=2)
        queued = seed_job(db, "run-page-queued", "queued", runs_dir=web_service.runs_dir, spec={"priority": 5})
        queued.queue, queued.priority = NOWHERE, 5
        queued.pending_reason = "Needs 4 free GPUs on one host; the most free now is 2 (web-host-a)."
        elastic = seed_job(db, "run-page-elastic", "running", runs_dir=web_service.runs_dir, total_steps=4000,
                           spec={"nproc": 4, "accumulation_steps": 2, "min_nproc": 2})  # fmt: skip
        elastic.queue = NOWHERE
        elastic.placement = {"nodes": [{"host": "web-host-a", "node_rank": 0, "gpus": ["0", "1"], "slots": 2}],
                             "nproc": 2, "accumulation_steps": 4}  # fmt: skip
        seed_curves(db, elastic, 300)
        now = datetime.now(timezone.utc)
        for name, gpus, seen in (
            ("web-host-a", ["0", "1", "2", "3"], now),
            ("web-host-dead", ["0"], now - timedelta(hours=2)),
        ):
            if db.get(Host, name) is None:
                db.add(Host(name=name, address=f"{name}.internal", pool=HOSTS_POOL, gpus=gpus, cpu_slots=4,
                            storage_id="web-test", heartbeat_at=seen))  # fmt: skip
        db.add_all([queued, elastic])
        db.commit()
        return {"done": done.id, "queued": queued.id, "elastic": elastic.id}


def _fits(page, name: str) -> None:
    found = page.evaluate(WIDE)
    shot(page, name)
    assert found["scrollWidth"] <= found["innerWidth"], f"{name}: wider than the screen: {found}"


@pytest.mark.parametrize("size", list(SIZES))
def test_run_page_outcome_config_charts_logs(new_page, web_service, run_jobs, size) -> None:
    page = new_page(viewport=SIZES[size])
    page.goto(f"{web_service.base}/jobs/{run_jobs['done']}")
    page.wait_for_selector("#chart-loss[data-points]")
    # The outcome fills in as each series arrives (the panel's onChange): wait for both val/* series, not the first.
    page.wait_for_selector("#job-outcome:not([hidden]) [data-metric='val/loss']")
    page.wait_for_selector("#job-outcome:not([hidden]) [data-metric='val/accuracy']")
    # Outcome first: final and best val/* with their steps; no progress bar, no ETA.
    outcome = page.locator("#job-outcome").inner_text()
    assert "Finished 2,000 steps" in outcome and "val/accuracy" in outcome
    assert "final, step 2,000" in page.locator("[data-metric='val/loss']").inner_text()
    assert "(max)" in page.locator("[data-metric='val/accuracy'] .outcome-best").inner_text()
    assert page.locator("#job-progress-row").is_hidden()
    # Configuration: what differs from the defaults first.
    changed = page.locator("#config-changed-body tr").evaluate_all("rows => rows.map(r => r.dataset.path)")
    assert {"batch_size", "optimizer.name", "optimizer.lr", "max_steps"} <= set(changed), changed
    assert "optimizer.momentum" not in changed
    # Charts: grouped, smoothed (a faded raw curve and the EMA), log chosen for lr (it spans decades).
    assert page.locator(".chart-group[data-group='train'] figure").count() == 3
    assert page.locator("#chart-lr").get_attribute("data-log") == "true"
    assert page.locator("#chart-loss").get_attribute("data-log") == "false"
    assert page.evaluate("() => document.querySelector('#chart-loss .u-over') !== null")
    # One cursor across charts; val/accuracy (every 50 steps) snaps to its nearest point.
    over = page.locator("#chart-loss .u-over")
    over.scroll_into_view_if_needed()
    box = over.bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.503, box["y"] + box["height"] / 2)
    page.wait_for_function("() => /at step/.test(document.querySelector('#chart-acc .legend-cursor').textContent)")
    acc = page.locator("#chart-acc .legend-cursor").inner_text()
    step = int(acc.rsplit("step", 1)[1].replace(",", "").strip())
    assert step % 50 == 0, acc
    assert "latest" in page.locator("#chart-loss .legend-latest").first.inner_text()
    shot(page, f"run-{size}-cursor", full_page=False)
    page.mouse.move(0, 0)
    # Smoothing off: only the raw series are drawn.
    page.locator("#smoothing").fill("0")
    page.wait_for_function("() => document.querySelector('#smoothing-value').textContent === '0.00'")
    # Logs: search, and download a rank's whole log.
    page.wait_for_function("() => document.querySelector('#log-text').textContent.includes('[rank 0]')")
    page.fill("#log-search", "[rank 0] step   500")  # the merged view shows every rank's line for step 500
    page.wait_for_function("() => document.querySelector('#log-text').dataset.matches === '1'")
    assert page.locator("#log-matches").inner_text() == "1 of 1"
    if size == "laptop":
        page.select_option("#log-rank", "1")
        with page.expect_download() as info:
            page.click("#log-download")
        assert info.value.suggested_filename == f"job_{run_jobs['done']}_rank1_stderr.log"
        assert "[rank 1] step   990" in Path(info.value.path()).read_text()
    page.evaluate("() => localStorage.removeItem('rankzero.smoothing')")
    _fits(page, f"run-{size}-done")

    # A queued job says why it waits.
    page.goto(f"{web_service.base}/jobs/{run_jobs['queued']}")
    page.wait_for_selector("#job-waiting:not([hidden])")
    with web_service.client() as client:  # the scheduler may have put its own words there meanwhile
        reason = client.get(f"/api/jobs/{run_jobs['queued']}").json()["pending_reason"]
    if reason:
        page.wait_for_function("r => document.querySelector('#job-waiting-text').textContent.startsWith(r)", arg=reason)
    assert "Priority 5" in page.locator("#job-waiting-text").inner_text()
    page.wait_for_selector("#charts-empty:not([hidden])")
    assert page.locator("#charts-body figure").count() == 0  # no empty chart cards
    _fits(page, f"run-{size}-queued")

    # An elastic fit says where and on how many ranks.
    page.goto(f"{web_service.base}/jobs/{run_jobs['elastic']}")
    page.wait_for_selector("#job-placement:not([hidden])")
    text = page.locator("#job-placement").inner_text()
    assert "Running on web-host-a" in text and "on 2 of 4 ranks (accumulation ×4)" in text, text
    page.wait_for_selector("#chart-loss[data-points]")
    _fits(page, f"run-{size}-elastic")

    # Hosts: GPUs used/free, what runs where, a dead host greyed.
    page.goto(f"{web_service.base}/hosts")
    page.wait_for_selector("#hosts-table[data-loaded] tr[data-host='web-host-a']")
    host = page.locator("tr[data-host='web-host-a']")
    assert "2 of 4 used" in host.inner_text()
    assert host.locator(f"a[href='/jobs/{run_jobs['elastic']}']").count() == 1
    dead = page.locator("tr[data-host='web-host-dead']")
    assert "host-dead" in dead.get_attribute("class") and "dead" in dead.inner_text()
    _fits(page, f"run-{size}-hosts")
