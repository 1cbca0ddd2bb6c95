"""The job page in chromium: a finished job's time bar (one segment per part, a legend), and a queued job's
place in its pool's queue in the waiting box."""

from __future__ import annotations

import pytest

from tests.support.browser import shot
from tests.support.rows import insert_job, seed_job

pytestmark = pytest.mark.browser


@pytest.fixture
def db(web_service):
    from sqlmodel import Session

    from core.db import get_engine

    with Session(get_engine(web_service.database_url)) as session:
        yield session


def test_time_bar_and_queue_place(page, web_service, db) -> None:
    job = seed_job(db, "time-bar", "succeeded", runs_dir=web_service.runs_dir, total_steps=200)
    page.goto(f"{web_service.base}/jobs/{job.id}")
    page.wait_for_selector("#job-time:not([hidden]) .time-seg")
    legend = page.locator("#job-time-legend").inner_text()
    assert "training" in legend and "%" in legend, legend
    assert page.locator("#job-time-bar .time-seg").count() == page.locator("#job-time-legend li").count()
    shot(page, "job-time-bar")

    # A pool no host serves: the job is never placed (nor run by the service's worker), and says so.
    queued = insert_job(db, "nowhere-queued", queue="knowwhy-nowhere")
    page.goto(f"{web_service.base}/jobs/{queued.id}")
    page.wait_for_selector("#job-waiting-estimate:not([hidden])")
    text = page.locator("#job-waiting-estimate").inner_text()
    assert text.startswith("#1 in its pool's queue") and "start not known yet" in text, text
