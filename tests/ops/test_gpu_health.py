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


def on_gpu(gpu: str) -> dict:
    return {"nodes": [{"host": "h", "node_rank": 0, "gpus": [gpu], "slots": 0}], "nproc": 1, "accumulation_steps": 1}


def test_the_host_watch_marks_the_gpu_and_notes_it_in_the_timeline_of_the_job_on_it(api_settings, tmp_path) -> None:
    from sqlmodel import Session, select

    from core.db import get_engine
    from core.migrate import upgrade
    from core.tables import Host, Job, JobStatus, JobTransition
    from tests.support.rows import insert_job
    from worker import drain
    from worker.host_watch import HostWatch

    health = tmp_path / "h.json"
    health.write_text(json.dumps({"1": {"ecc_uncorrected": 3}}))
    settings = api_settings(host_name="h", gpu_health_file=health)
    upgrade(settings.resolved_database_url)
    engine = get_engine(settings.resolved_database_url)
    with Session(engine) as s:
        s.add(Host(name="h", address="a", pool="rankzero", gpus=["0", "1"], cpu_slots=1, storage_id="x"))
        s.commit()
        on_it = insert_job(s, "on-gpu-1", JobStatus.running, placement=on_gpu("1")).id
        elsewhere = insert_job(s, "on-gpu-0", JobStatus.running, placement=on_gpu("0")).id
    watch = HostWatch(settings, ["0", "1"], FileSource(health))
    watch.once()
    watch.once()  # nothing new: no second note
    with Session(engine) as s:
        assert "3 uncorrected ECC" in (s.get_one(Host, "h").gpu_faults or {})["1"]
        notes = lambda job: [t.detail for t in s.exec(select(JobTransition).where(JobTransition.job_id == job))]  # noqa: E731
        assert [n for n in notes(on_it) if n and "GPU 1 of host h failed" in n] != []
        assert len([n for n in notes(on_it) if n and "health check" in n]) == 1
        assert not [n for n in notes(elsewhere) if n and "health check" in n]
        assert s.get_one(Job, on_it).status == JobStatus.running  # a note, not a move
    assert not drain.host_drained(settings)
