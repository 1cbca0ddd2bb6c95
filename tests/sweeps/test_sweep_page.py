"""The sweep page in Debian's chromium (tests/support/browser.py): trials best first with the best marked,
sortable columns, the charts drawn, no console error and nothing wider than the screen on a laptop and a
phone. Rows are seeded the way the driver and the worker write them (no training run)."""

from __future__ import annotations

from typing import Any

import pytest

from core.sweeps.space import SweepSpec
from core.tables import MetricPoint, Sweep, SweepTrial
from tests.support.browser import shot
from tests.support.rows import seed_job

pytestmark = pytest.mark.browser

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

LRS = [0.3, 0.1, 0.03, 0.01, 0.003, 0.001]
BATCHES = [16, 32, 16, 32, 16, 32]


@pytest.fixture(scope="module")
def seeded_sweep(web_service: Any) -> dict[str, Any]:
    from sqlmodel import Session

    from core.db import get_engine

    spec = SweepSpec.model_validate(
        {
            "name": "page-sweep",
            "job": {"max_steps": 100, "data": {"name": "digits"}},
            "method": "random",
            "trials": 6,
            "parameters": {"optimizer.lr": {"log_uniform": [0.001, 0.5]}, "batch_size": {"choice": [16, 32]}},
            "early_stopping": {"min_steps": 20},
        }
    )
    with Session(get_engine(web_service.database_url)) as db:
        sweep = Sweep(
            name=spec.name,
            spec=spec.model_dump(mode="json", by_alias=True),
            status="finished",
            queue="x",
            note="6 trials (2 pruned, 0 failed)",
        )
        db.add(sweep)
        db.commit()
        db.refresh(sweep)
        job_ids = []
        for n, (lr, batch) in enumerate(zip(LRS, BATCHES, strict=True)):
            pruned = n >= 4
            job = seed_job(
                db,
                f"page-sweep-t{n}",
                "cancelled" if pruned else "succeeded",
                runs_dir=web_service.runs_dir,
                spec={
                    "optimizer": {"lr": lr},
                    "batch_size": batch,
                    "params": {"optimizer.lr": lr, "batch_size": batch},
                },
            )
            assert job.id is not None
            job_ids.append(job.id)
            steps = range(10, 50 if pruned else 110, 10)
            for seq, step in enumerate(steps):
                value = 0.2 + abs(lr - 0.03) * 5 + 1.0 / step
                db.add(MetricPoint(job_id=job.id, seq=seq, step=step, name="val/loss", value=value, time=0.0))
            db.add(
                SweepTrial(
                    sweep_id=sweep.id,
                    number=n,
                    job_id=job.id,
                    params={"optimizer.lr": lr, "batch_size": batch},
                    pruned=pruned,
                    pruned_step=40 if pruned else None,
                )
            )
        db.commit()
        return {"id": sweep.id, "jobs": job_ids}


@pytest.mark.parametrize(("width", "height"), [(1440, 900), (390, 844)])
def test_the_sweep_page_shows_the_winner(
    new_page: Any, web_service: Any, seeded_sweep: dict[str, Any], width: int, height: int
) -> None:
    page = new_page(viewport={"width": width, "height": height})
    page.goto(f"{web_service.base}/sweeps/{seeded_sweep['id']}")
    page.wait_for_selector("#sweep-body tr")
    page.wait_for_selector("#sweep-curves:not([hidden]) .uplot")
    heads = page.locator("#sweep-head th").all_inner_texts()
    assert [h.strip() for h in heads] == [
        "# ▲",
        "Trial",
        "Status",
        "optimizer.lr",
        "batch_size",
        "val/loss (final)",
        "val/loss (best)",
        "Step",
    ]
    rows = page.locator("#sweep-body tr")
    assert rows.count() == 6
    first = rows.nth(0)
    assert "best" in (first.get_attribute("class") or "") and "★" in first.inner_text()
    assert first.get_attribute("data-job-id") == str(seeded_sweep["jobs"][2])  # lr 0.03: the lowest final loss
    assert page.locator("#sweep-body tr .badge-pruned").count() == 2
    # Sort by the learning rate, ascending then descending.
    page.locator("#sweep-head th", has_text="optimizer.lr").locator("button").click()
    lrs = [float(t) for t in page.locator("#sweep-body tr td:nth-child(4)").all_inner_texts()]
    assert lrs == sorted(LRS)
    page.locator("#sweep-head th", has_text="optimizer.lr").locator("button").click()
    lrs = [float(t) for t in page.locator("#sweep-body tr td:nth-child(4)").all_inner_texts()]
    assert lrs == sorted(LRS, reverse=True)
    assert page.locator("#sweep-scatters canvas").count() == 2
    drawn = page.evaluate(
        "() => { const c = document.querySelector('#sweep-parallel'); "
        "return c.getContext('2d').getImageData(0, 0, c.width, c.height).data.some((v) => v > 0); }"
    )
    assert drawn
    found = page.evaluate(WIDE)
    assert found["scrollWidth"] <= found["innerWidth"] and not found["out"], found
    shot(page, f"sweep-{width}x{height}")


def test_the_sweeps_list_links_each_sweep(new_page: Any, web_service: Any, seeded_sweep: dict[str, Any]) -> None:
    page = new_page(viewport={"width": 390, "height": 844})
    page.goto(f"{web_service.base}/sweeps")
    link = page.locator(f"#sweep-body a[href='/sweeps/{seeded_sweep['id']}']")
    link.wait_for()
    assert "page-sweep" in link.inner_text()
    found = page.evaluate(WIDE)
    assert found["scrollWidth"] <= found["innerWidth"] and not found["out"], found
    shot(page, "sweeps-list-390x844")
