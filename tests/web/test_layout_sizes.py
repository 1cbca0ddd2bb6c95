"""Every page at a laptop (1440×900) and a phone (390×844): nothing wider than the screen
(document scrollWidth ≤ innerWidth), no console errors (the `new_page` fixture), and on the phone
the jobs list shows each job's progress and loss on screen. Screenshots: test-output/screenshots/layout-*."""

from __future__ import annotations

import pytest

from tests.support.browser import shot
from tests.support.rows import seed_checkpoint, seed_curves, seed_job, seed_logs

SIZES = {"laptop": {"width": 1440, "height": 900}, "phone": {"width": 390, "height": 844}}

# The elements sticking out past the right edge, to name them when the page is too wide.
WIDE = """() => {
  const w = window.innerWidth;
  const out = [];
  for (const el of document.querySelectorAll('body *')) {
    const r = el.getBoundingClientRect();
    if (r.right > w + 0.5 && r.width > 0) {
      let scrolls = false;
      for (let p = el.parentElement; p; p = p.parentElement) {
        const s = getComputedStyle(p);
        if (/(auto|scroll|hidden)/.test(s.overflowX) && p !== document.body && p !== document.documentElement) {
          scrolls = true; break;
        }
      }
      if (!scrolls) out.push(`${el.tagName.toLowerCase()}#${el.id}.${el.className} right=${Math.round(r.right)}`);
    }
  }
  return {scrollWidth: document.documentElement.scrollWidth, innerWidth: w, out: out.slice(0, 8)};
}"""


@pytest.fixture(scope="module")
def layout_jobs(web_service, tmp_path_factory):
    from sqlmodel import Session

    from core.db import get_engine

    with Session(get_engine(web_service.database_url)) as db:
        running = seed_job(db, "layout-running-with-a-rather-long-name", "running", runs_dir=web_service.runs_dir,
                           total_steps=4000, spec={"nproc": 2, "accumulation_steps": 2})  # fmt: skip
        seed_curves(db, running, 2000)
        ckpt = seed_checkpoint(db, running, 1000)
        seed_logs(running, ranks=2)
        done = seed_job(db, "layout-done", "succeeded", runs_dir=web_service.runs_dir, total_steps=1000)
        seed_curves(db, done, 1000)
        failed = seed_job(db, "layout-failed", "failed", runs_dir=web_service.runs_dir, total_steps=500, step=120,
                          failed_rank=1, exit_code=1, error="RuntimeError: BUILDERS[spec.name](**spec.args) failed at "
                          + "/very/long/unbroken/path/" * 12 + "model.py")  # fmt: skip
        return {"running": running.id, "done": done.id, "failed": failed.id, "checkpoint": ckpt.id}


def _check(page, name: str) -> None:
    found = page.evaluate(WIDE)
    shot(page, name)
    assert found["scrollWidth"] <= found["innerWidth"], f"{name}: wider than the screen: {found}"


@pytest.mark.parametrize("size", list(SIZES))
def test_no_page_is_wider_than_the_screen(new_page, web_service, layout_jobs, size) -> None:
    page = new_page(viewport=SIZES[size])
    base = web_service.base
    page.goto(f"{base}/?name=layout-")
    page.wait_for_selector("#jobs-table[data-loaded]")
    page.wait_for_function("() => document.querySelectorAll('#jobs-body tr').length === 3")
    _check(page, f"layout-{size}-jobs")
    # Each job's progress and loss are on screen, not off to the side.
    row = page.locator(f"tr[data-job-id='{layout_jobs['running']}']")
    for part in (".bar", "td.loss"):
        box = row.locator(part).bounding_box()
        assert box and box["x"] >= 0 and box["x"] + box["width"] <= SIZES[size]["width"], (part, box)
    assert row.locator("td.loss").inner_text().strip()

    page.goto(f"{base}/jobs/{layout_jobs['running']}")
    page.wait_for_selector("#chart-loss[data-points]")
    page.wait_for_function("() => document.querySelectorAll('#checkpoints-body tr').length === 1")
    page.wait_for_function("() => document.querySelector('#log-text').textContent.includes('[rank 0]')")
    _check(page, f"layout-{size}-job")

    page.goto(f"{base}/jobs/{layout_jobs['failed']}")
    page.wait_for_selector("#job-error:visible")
    _check(page, f"layout-{size}-failed")

    page.goto(f"{base}/new")
    page.wait_for_selector("#job-form[data-ready]")
    _check(page, f"layout-{size}-new")

    page.goto(f"{base}/new?resume={layout_jobs['checkpoint']}")
    page.wait_for_selector("#job-form[data-ready]")
    _check(page, f"layout-{size}-resume")

    page.goto(f"{base}/compare?ids={layout_jobs['running']},{layout_jobs['done']}")
    page.wait_for_function("() => document.querySelectorAll('#compare-jobs li').length === 2")
    page.wait_for_selector("#compare-chart .u-over")
    _check(page, f"layout-{size}-compare")
