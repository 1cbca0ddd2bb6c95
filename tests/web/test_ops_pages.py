"""Operating pages over seeded rows (no worker, no training run): the hosts page shows an operator's
drain (with its note) and a faulty GPU (with its reason), and its Drain button drains a host (the API
says so); a chart series read from a script's console is labelled "from the console"; a job's webhook
delivery log shows in its collapsible section."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import httpx

from core.tables import Host, NotificationDelivery, NotificationEvent
from tests.support.browser import shot
from tests.support.rows import bulk_points, seed_job


def _host(db, name: str, **fields) -> Host:
    row = Host(name=name, address=f"{name}.lan", pool="default", storage_id="web-test", cpu_slots=4, **fields)
    db.add(row)
    db.commit()
    return row


def _hosts(web_service) -> dict[str, dict]:
    r = httpx.get(f"{web_service.base}/api/hosts", headers={"Authorization": f"Bearer {web_service.token}"})
    r.raise_for_status()
    return {h["name"]: h for h in r.json()}


def test_hosts_page_shows_drain_and_gpu_faults_and_drains_a_host(page, new_page, web_service, db) -> None:
    _host(db, "ops-drained", gpus=["0", "1"], drain_requested=True, drain_note="replacing the PSU on Friday")
    _host(db, "ops-faulty", gpus=["0", "1", "2", "3"], gpu_faults={"2": "Xid 79: GPU has fallen off the bus"})

    page.goto(f"{web_service.base}/hosts")
    page.wait_for_selector("#hosts-table[data-loaded]")
    drained = page.locator("tr[data-host='ops-drained']")
    assert drained.locator(".badge").inner_text() == "drained"
    assert "replacing the PSU on Friday" in drained.locator(".drain-note").inner_text()
    assert drained.get_by_role("button", name="Undrain ops-drained").is_visible()
    faulty = page.locator("tr[data-host='ops-faulty']")
    assert faulty.locator(".gpu-fault").inner_text() == "2"
    assert "Xid 79: GPU has fallen off the bus" in faulty.locator(".gpu-faults li[data-gpu='2']").inner_text()
    assert "1 faulty" in faulty.locator(".gpu-count").inner_text()
    shot(page, "hosts-ops-1440")

    # Drain ops-faulty from the page: the dialog's note goes with it (CSRF header and all).
    page.get_by_role("button", name="Drain ops-faulty").click()
    page.fill("#drain-note", "GPU 2 swap")
    with page.expect_response(lambda r: r.url.endswith("/api/hosts/ops-faulty/drain") and r.status == 200):
        page.click("#drain-confirm")
    page.wait_for_function(
        "() => document.querySelector(\"tr[data-host='ops-faulty'] .badge\").textContent === 'drained'"
    )
    api = _hosts(web_service)["ops-faulty"]
    assert api["drain_requested"] is True and api["drain_note"] == "GPU 2 swap"

    # Undrain ops-drained: the API gives it back to the scheduler.
    with page.expect_response(lambda r: r.url.endswith("/api/hosts/ops-drained/undrain") and r.status == 200):
        page.get_by_role("button", name="Undrain ops-drained").click()
    page.wait_for_function(
        "() => document.querySelector(\"tr[data-host='ops-drained'] .badge\").textContent === 'alive'"
    )
    assert _hosts(web_service)["ops-drained"]["drain_requested"] is False

    for width, height in ((1440, 900), (390, 844)):
        p = new_page(viewport={"width": width, "height": height})
        p.goto(f"{web_service.base}/hosts")
        p.wait_for_selector("#hosts-table[data-loaded]")
        overflow = p.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert overflow <= 0, f"the hosts page scrolls sideways at {width}px"
        shot(p, f"hosts-ops-{width}")


def test_console_series_is_labelled_and_notifications_show(page, web_service, db) -> None:
    job = seed_job(db, "ops-console", "succeeded", runs_dir=web_service.runs_dir, total_steps=200)
    job.spec = {**job.spec, "entrypoint": "train.py"}  # a script job: only those have console series
    db.add(job)
    db.commit()
    assert job.id is not None and job.run_dir is not None
    bulk_points(db, job.id, "train/loss", 200)
    bulk_points(db, job.id, "reward", 20, every=10, first_seq=1_000_000)
    run = Path(job.run_dir)
    run.mkdir(parents=True, exist_ok=True)
    (run / "console_series.json").write_text(json.dumps({"names": ["reward"]}))
    event = NotificationEvent(job_id=job.id, kind="succeeded", status="succeeded", attempt=1)
    db.add(event)
    db.commit()
    now = datetime.now(timezone.utc)
    db.add(
        NotificationDelivery(
            event_id=event.id,
            job_id=job.id,
            url="https://hooks.example.com/secret/path",
            state="delivered",
            attempts=1,
            last_status=204,
            delivered_at=now,
        )
    )
    db.add(
        NotificationDelivery(
            event_id=event.id,
            job_id=job.id,
            url="https://down.example.org/x",
            state="failed",
            attempts=5,
            last_error="connection refused",
        )
    )
    db.commit()

    page.goto(f"{web_service.base}/jobs/{job.id}")
    page.wait_for_selector("#chart-reward[data-points]")
    assert page.locator("#chart-reward .chart-title").inner_text() == "reward (from the console)"
    assert "reward (from the console)" in page.locator("#chart-reward .legend-name").all_inner_texts()
    assert "from the console" not in page.locator("#chart-loss .chart-title").inner_text()
    assert page.locator("#chart-reward").get_attribute("data-console") is not None

    page.wait_for_selector("#job-notifications:not([hidden])")
    assert "2 deliveries (1 failed)" in page.locator("#notifications-summary").inner_text()
    page.click("#notifications-summary")
    rows = page.locator("#notifications-body tr")
    assert rows.count() == 2
    text = page.locator("#notifications-body").inner_text()
    assert "connection refused" in text and "HTTP 204" in text and "job.succeeded" in text
    assert "secret" not in text  # the route keeps a webhook's path (its secret) to itself
    shot(page, "job-console-notifications")
