"""The job page of a Slurm pool's job, in a real browser (seeded rows, the `new_page` fixture: no console error):
the header names its pool, the Slurm job, its partition and nodes; under it, Slurm's state in words — for a running
job and for one waiting in Slurm's queue."""

from __future__ import annotations

import pytest

from tests.support.rows import seed_job

pytestmark = pytest.mark.xdist_group("slurm")

POOL = "web-test-slurm"  # no agent serves it: the seeded rows stay as they are


@pytest.fixture(scope="module")
def slurm_jobs(web_service):
    from sqlmodel import Session

    from core.db import get_engine
    from core.tables import JobStatus

    seeded = {}
    with Session(get_engine(web_service.database_url)) as db:
        for name, status, slurm_id, nodes, state, words in (
            ("slurm-running", "running", "41", "n[1-2]", "RUNNING", "Slurm job 41: running on n[1-2] in partition low"),
            (
                "slurm-waiting",
                "starting",
                "42",
                None,
                "PENDING",
                "Slurm job 42: waiting for resources in partition low",
            ),
        ):
            job = seed_job(db, name, "running", runs_dir=web_service.runs_dir, total_steps=100)
            job.status = JobStatus(status)  # a Slurm pool's job waits in Slurm's queue as `starting`
            job.queue, job.worker_host, job.backend_job_id, job.backend_first_attempt = (
                POOL,
                f"slurm:{POOL}",
                slurm_id,
                1,
            )
            job.backend_partition, job.backend_nodes, job.backend_state, job.backend_state_words = (
                "low",
                nodes,
                state,
                words,
            )
            job.pending_reason = words if status == "starting" else None
            db.add(job)
            db.commit()
            seeded[name] = job.id
    return seeded


def test_the_job_page_shows_partition_nodes_and_slurms_words(new_page, web_service, slurm_jobs) -> None:
    page = new_page()
    page.goto(f"{web_service.base}/jobs/{slurm_jobs['slurm-running']}")
    page.wait_for_selector("#job-placement:not([hidden])")
    facts = page.locator("#job-facts").inner_text()
    assert "Slurm job 41" in facts and "partition low" in facts and "nodes n[1-2]" in facts, facts
    assert f"pool {POOL}" in facts, facts  # the pool it runs in (issue 35 part 3)
    assert page.locator("#job-placement").inner_text() == "Slurm job 41: running on n[1-2] in partition low"

    page.goto(f"{web_service.base}/jobs/{slurm_jobs['slurm-waiting']}")
    page.wait_for_selector("#job-placement:not([hidden])")
    facts = page.locator("#job-facts").inner_text()
    assert "Slurm job 42" in facts and "partition low" in facts and "nodes" not in facts, facts
    assert page.locator("#job-placement").inner_text() == "Slurm job 42: waiting for resources in partition low"
