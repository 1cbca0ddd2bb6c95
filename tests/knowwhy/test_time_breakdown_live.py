"""A real job through the API and a worker: its time breakdown sums to its wall time."""

from __future__ import annotations

from datetime import datetime

import pytest

from core.time_breakdown import PARTS
from tests.support.jobs import fake_spec


def test_a_finished_jobs_breakdown_sums_to_its_wall_time(service, workers) -> None:
    settings, client = service()
    workers.start(settings)
    job = client.submit(fake_spec(nproc=2, behaviour={"step_s": 0.05}))
    done = client.wait_terminal(job["id"], timeout=120)
    assert done["status"] == "succeeded", (done, workers.log())
    parts = done["time_breakdown"]
    wall = (datetime.fromisoformat(done["finished_at"]) - datetime.fromisoformat(done["created_at"])).total_seconds()
    assert parts["wall_s"] == pytest.approx(wall, abs=0.01)
    assert sum(parts[p] for p in PARTS) == pytest.approx(wall, abs=0.01)
    assert parts["training"] > 0 and parts["starting"] > 0, parts  # 20 steps of 0.05 s; a worker's launch
    assert parts["lost_to_restarts"] == 0 and parts["stopped"] == 0, parts


def test_the_built_in_trainers_saves_are_counted_as_checkpointing(service, workers) -> None:
    settings, client = service()
    workers.start(settings, fake=False)
    spec = {
        "name": "saves", "model": {"name": "mlp"}, "data": {"name": "digits"}, "device": "cpu", "batch_size": 16,
        "max_steps": 30, "log_every": 1, "eval_every": 1000, "checkpoint": {"every_steps": 10, "every_epochs": None},
    }  # fmt: skip
    job = client.submit(spec)
    done = client.wait_terminal(job["id"], timeout=300)
    assert done["status"] == "succeeded", (done, workers.log())
    parts = done["time_breakdown"]
    saves = client.http.get(f"/jobs/{job['id']}/metrics", params={"name": "time/checkpoint_s"}).json()["series"]
    assert [p["step"] for p in saves[0]["points"]] == [10, 20, 30], saves
    assert parts["checkpointing"] == pytest.approx(sum(p["value"] for p in saves[0]["points"]), abs=0.01), parts
    assert sum(parts[p] for p in PARTS) == pytest.approx(parts["wall_s"], abs=0.01)
