"""GPU health: a stand-in for NVML (the health file) reporting an Xid on host a's GPU takes it out of
placement (GET /api/hosts says why) and the next GPU job goes to host b; the judging rules, table-driven.
Real Celery workers posing as two one-GPU hosts, with the torch-free stand-in trainer."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.support.jobs import fake_spec, wait
from worker.gpu_health import FileSource, GpuReading, Tracker, judge

FAST = {"RANKZERO_SCHEDULER_POLL_S": "0.2", "RANKZERO_GPUS": "0"}


def test_a_gpu_with_an_xid_leaves_placement_and_the_next_job_goes_elsewhere(service, workers, tmp_path: Path) -> None:
    settings, client = service()
    health = tmp_path / "gpu-health-a.json"
    health.write_text(json.dumps({"0": {"xid": [79], "temperature_c": 60}}))  # fallen off the bus
    workers.start(settings, name="a@%h", extra_env={**FAST, "RANKZERO_HOST_NAME": "a",
                                                    "RANKZERO_GPU_HEALTH_FILE": str(health)})  # fmt: skip
    workers.start(settings, name="b@%h", extra_env={**FAST, "RANKZERO_HOST_NAME": "b"})

    def host(name: str) -> dict | None:
        return next((h for h in client.http.get("/hosts").json() if h["name"] == name and h["alive"]), None)

    a = wait(lambda: (h := host("a")) and h["gpu_faults"] and h, 60, "host a's GPU fault")
    assert "Xid 79" in a["gpu_faults"]["0"] and a["free_gpus"] == [] and a["gpus"] == ["0"]
    wait(lambda: host("b"), 60, "host b up")

    job = client.submit(fake_spec("needs-a-gpu", device="cuda"))
    placed = client.wait(job["id"], lambda j: j["placement"] is not None or j["status"] != "queued", 60, "placed")
    assert placed["placement"]["nodes"][0]["host"] == "b"
    assert client.wait_terminal(job["id"])["status"] == "succeeded"
    faulty = [
        ln
        for ln in httpx.get(
            client.http.base_url.copy_with(path="/metrics"), headers=client.http.headers
        ).text.splitlines()
        if ln.startswith("rankzero_host_gpus{")
    ]
    assert 'rankzero_host_gpus{host="a",state="faulty"} 1.0' in faulty, faulty


@pytest.mark.parametrize(
    ("reading", "reason"),
    [
        (GpuReading(temperature_c=60), None),
        (GpuReading(xids=(13,)), None),  # a program's own error (graphics engine exception): not the GPU's
        (GpuReading(xids=(13, 79)), "Xid 79"),
        (GpuReading(ecc_uncorrected=2), "2 uncorrected ECC"),
        (GpuReading(temperature_c=95), "95 °C, above 90 °C"),
        (GpuReading(hw_slowdown=True), "throttled by the hardware"),
        (GpuReading(error="GPU is lost"), "unreadable: GPU is lost"),
    ],
)
def test_judge(reading: GpuReading, reason: str | None) -> None:
    got = judge(reading, max_temp_c=90)
    assert (got is None) if reason is None else (got is not None and reason in got)


def test_xid_and_ecc_faults_stick_a_hot_gpu_comes_back_when_it_cools() -> None:
    t = Tracker()
    assert set(t.faults({"0": GpuReading(xids=(79,)), "1": GpuReading(temperature_c=99)}, 90)) == {"0", "1"}
    assert set(t.faults({"0": GpuReading(), "1": GpuReading(temperature_c=70)}, 90)) == {"0"}


def test_health_file_readings(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    assert FileSource(path).read(["0"]) == {}  # no file: nothing to report
    path.write_text(json.dumps({"0": {"xid": [48, "x"], "ecc_uncorrected": 1}, "1": "junk"}))
    assert FileSource(path).read(["0", "1", "2"]) == {"0": GpuReading(xids=(48,), ecc_uncorrected=1)}
    path.write_text("{not json")
    assert FileSource(path).read(["0"]) == {}
