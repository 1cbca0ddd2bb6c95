"""A real job through the API and a worker: its time breakdown sums to its wall time."""

from __future__ import annotations

from datetime import datetime

import pytest

from core.time_breakdown import PARTS
from tests.support.jobs import fake_spec


def test_a_finished_jobs_breakdown_sums_to_its_wall_time(service, workers) -> None:
    settings, client = service()
    workers.start(settings)
    job = client.submit(fake_spec(nproc=2, args={"step_s": 0.05}))
    done = client.wait_terminal(job["id"], timeout=120)
    assert done["status"] == "succeeded", (done, workers.log())
    parts = done["time_breakdown"]
    wall = (datetime.fromisoformat(done["finished_at"]) - datetime.fromisoformat(done["created_at"])).total_seconds()
    assert parts["wall_s"] == pytest.approx(wall, abs=0.01)
    assert sum(parts[p] for p in PARTS) == pytest.approx(wall, abs=0.01)
    assert parts["training"] > 0 and parts["starting"] > 0, parts  # 20 steps of 0.05 s; a worker's launch
    assert parts["lost_to_restarts"] == 0 and parts["stopped"] == 0, parts
