"""The job page in chromium: the Ranks card names the stuck rank with its Python stacks, and the rank slower
than the median rank (the job row's `rank_progress` and `stuck_ranks`, as node 0's worker writes them)."""

from __future__ import annotations

import time

import pytest

from tests.support.browser import shot
from tests.support.rows import seed_job

pytestmark = pytest.mark.browser

STACK = 'Thread 7 (idle): "MainThread"\n    sleep_forever (train.py:15)\n    <module> (train.py:24)\n'


@pytest.fixture
def db(web_service):
    from sqlmodel import Session

    from core.db import get_engine

    with Session(get_engine(web_service.database_url)) as session:
        yield session


def test_the_ranks_card_names_the_stuck_and_the_slow_rank(page, web_service, db) -> None:
    job = seed_job(db, "ranks-card", "failed", runs_dir=web_service.runs_dir, total_steps=200)
    now = time.time()
    job.rank_progress = {"attempt": 1, "at": now, "ranks": [
        {"rank": 0, "step": 5, "progress_at": now - 12, "phase": "wait", "step_s": 0.2, "work_s": 0.05},
        {"rank": 1, "step": 5, "progress_at": now - 12, "phase": "work", "step_s": 0.2, "work_s": 0.15},
    ]}  # fmt: skip
    job.stuck_ranks = {
        "attempt": 1, "at": now, "ranks": [1], "waiting": [0], "how": "work",
        "sentence": "rank 1 hung inside its own work (last step done: 5); rank 0 waited for it",
        "stacks": {"1": STACK}, "unavailable": {},
    }  # fmt: skip
    db.add(job)
    db.commit()
    page.goto(f"{web_service.base}/jobs/{job.id}")
    page.wait_for_selector("#job-ranks:not([hidden]) #job-ranks-body tr")
    said = page.locator("#job-ranks-stuck").inner_text()
    assert said == "Attempt 1 stalled: rank 1 hung inside its own work (last step done: 5); rank 0 waited for it."
    assert "sleep_forever (train.py:15)" in page.locator("#job-ranks-stacks details[data-rank='1'] pre").inner_text()
    assert page.locator("#job-ranks-slow li").all_inner_texts() == ["rank 1 is 1.5× slower than the median rank"]
    assert page.locator("#job-ranks-body tr[data-rank='1'] td").last.inner_text() == "1.5×"
    shot(page, "job-ranks")
