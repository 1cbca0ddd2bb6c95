"""What node 0 tells the job page about how an attempt runs (worker/node_zero.py), with a real worker."""

from __future__ import annotations

from tests.support.jobs import fake_spec


def test_a_job_run_without_the_sandbox_says_so_on_its_page(service, workers) -> None:
    """RANKZERO_SANDBOX=off: the running transition carries the "not isolated" warning, so the job's
    owner reads it on the job page, not only in the worker's log."""
    settings, client = service(sandbox="off")
    workers.start(settings, fake=True)
    job = client.submit(fake_spec(nproc=1))
    done = client.wait_terminal(job["id"], timeout=60)
    assert done["status"] == "succeeded", (done, workers.log())
    page = client.http.get(f"/jobs/{job['id']}").json()
    running = [t["detail"] for t in page["transitions"] if t["status"] == "running"]
    assert running and "this job is not isolated" in running[0] and "RANKZERO_SANDBOX=off" in running[0], running
