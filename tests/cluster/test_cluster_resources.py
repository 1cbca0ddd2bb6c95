"""The worker samples a job's processes as sys/... series and stops a job over its memory limit."""

from __future__ import annotations

from tests.support.jobs import slow_spec


def test_memory_limit_stops_the_job_and_system_series_are_charted(service, workers, start_host) -> None:
    settings, client = service()
    start_host(settings, "host-a", 4)
    hog = client.submit(
        slow_spec("over-limit", step_s=0.05, max_steps=400, every=1000, nproc=1, memory_limit_mb=256)
    )  # fmt: skip  (torchrun + a rank with torch: more)
    fine = client.submit(slow_spec("sampled", step_s=0.1, max_steps=40, every=1000, nproc=1))
    failed = client.wait_terminal(hog["id"], 120)
    assert failed["status"] == "failed", failed
    assert "over its memory_limit_mb 256" in failed["error"] and "MiB" in failed["error"], failed["error"]
    done = client.wait_terminal(fine["id"], 120)
    assert done["status"] == "succeeded", done
    names = {s["name"] for s in client.http.get(f"/jobs/{fine['id']}/metrics").json()["series"]}
    assert {"sys/rank0/rss_mb", "sys/rss_mb_total", "sys/rank0/cpu_percent"} <= names, names
    rss = client.http.get(f"/jobs/{fine['id']}/metrics", params={"name": "sys/rss_mb_total"}).json()
    values = [p["value"] for p in rss["series"][0]["points"]]
    assert values and 100 < max(values) < 8000, values  # a rank with torch: hundreds of MiB (less at launch)
