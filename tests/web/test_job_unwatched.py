"""The job page says when nothing has watched a job (issue 35): a running job whose worker host's heartbeat is
10 minutes old shows the server's sentence (REST `supervisor_silence`), and a watched one shows none."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from core.tables import Host
from tests.support.rows import seed_job

NOWHERE = "unwatched-test"  # no job of the web service's is of this pool: nothing is placed on these hosts


def test_the_job_page_says_nothing_has_watched_a_job_whose_host_went_silent(page, web_service, db) -> None:
    old = datetime.now(timezone.utc) - timedelta(minutes=10)
    db.add(Host(name="silent-host", address="silent-host.lan", pool=NOWHERE, storage_id="web-test", cpu_slots=4,
                heartbeat_at=old))  # fmt: skip
    db.add(Host(name="beating-host", address="beating-host.lan", pool=NOWHERE, storage_id="web-test", cpu_slots=4,
                heartbeat_at=datetime.now(timezone.utc) + timedelta(hours=1)))  # fmt: skip
    frozen = seed_job(db, "unwatched", "running", runs_dir=web_service.runs_dir)
    watched = seed_job(db, "watched", "running", runs_dir=web_service.runs_dir)
    frozen.worker_host, watched.worker_host = "silent-host", "beating-host"
    # The jobs' own heartbeats are fresh: the web service's recovery sweep (worker/recover.py reads a job's
    # heartbeat, not its host's) must not requeue them mid-test, which hid the banner under the assertion once.
    frozen.heartbeat_at = watched.heartbeat_at = datetime.now(timezone.utc) + timedelta(hours=1)
    db.add_all([frozen, watched])
    db.commit()

    page.goto(f"{web_service.base}/jobs/{frozen.id}")
    banner = page.locator("#job-unwatched")
    banner.wait_for(state="visible")
    page.wait_for_function("() => document.querySelector('#job-unwatched').textContent.startsWith('Nothing')")
    assert banner.inner_text().startswith(
        "Nothing has watched this job for 10 min: the worker on host silent-host was last seen at "
    ), banner.inner_text()

    page.goto(f"{web_service.base}/jobs/{watched.id}")
    page.wait_for_function("() => document.querySelector('#job-name')?.textContent.includes('watched')")
    assert not banner.is_visible()
