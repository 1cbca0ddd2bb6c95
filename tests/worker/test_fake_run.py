"""The worker end to end with a torch-free stand-in trainer: fast checks of the supervisor's logic."""

from __future__ import annotations

from tests.support.jobs import fake_spec


def test_fake_job_succeeds_and_is_ingested(service, workers):
    settings, client = service()
    workers.start(settings)
    job = client.submit(fake_spec(nproc=2))
    done = client.wait_terminal(job["id"], timeout=60)
    assert done["status"] == "succeeded", (done, workers.log())
    assert done["step"] == 20 and done["attempt"] == 1
    series = client.http.get(f"/jobs/{job['id']}/metrics", params={"name": "train/loss"}).json()["series"][0]
    assert [p["step"] for p in series["points"]] == list(range(1, 21))
    ckpts = client.http.get(f"/jobs/{job['id']}/checkpoints").json()
    assert ckpts and ckpts[-1]["step"] == 20 or max(c["step"] for c in ckpts) == 20
