"""A 2-node job over two hosts with separate runs dirs (host-a shares the API's, host-b has its own and
uploads): the scheduler places it (no shared runs dir required), host-b fetches what it needs from the
API and ships its part, and the job ends at the weights of the same job run on one node."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.jobs import assert_same_weights, reference_weights, run_dir, slow_spec, wait

STEPS = 20


def _spec(name: str) -> dict[str, Any]:
    return slow_spec(name, step_s=0.02, max_steps=STEPS, every=10, nproc=1, nnodes=2)


@pytest.mark.timeout(600)  # ~1 min on a quiet machine; a loaded one starts torch far slower
def test_two_nodes_with_separate_runs_dirs_match_one_node(service, workers, start_host, tmp_path: Path) -> None:
    settings, client = service()
    api_url = str(client.http.base_url).rstrip("/").removesuffix("/api")
    runs_b = tmp_path / "host-b-runs"
    start_host(settings, "host-a", 1)
    own = {"RANKZERO_RUNS_DIR": str(runs_b), "RANKZERO_DATA_DIR": str(tmp_path / "host-b-data")}
    start_host(settings, "host-b", 1, **own, RANKZERO_API_URL=api_url)
    storage = {h["name"]: h["storage"] for h in client.http.get("/hosts").json()}
    assert storage == {"host-a": "shared", "host-b": "store"}

    job = client.submit(_spec("two-nodes-two-dirs"))
    done = client.wait_terminal(job["id"], 240)
    assert done["status"] == "succeeded", (done["error"], done["transitions"])
    assert sorted(n["host"] for n in done["placement"]["nodes"]) == ["host-a", "host-b"]
    assert (runs_b / f"job_{job['id']}").is_dir()  # host-b ran its node in its own runs dir

    # Both nodes' rank logs reach the API (host-b's shipped as they grew, the last of them as its node ends).
    def ranks() -> list[int]:
        return client.http.get(f"/jobs/{job['id']}/logs", params={"stream": "stderr"}).json()["ranks"]

    wait(lambda: ranks() == [0, 1], 30, "host-b's rank logs at the API")
    one_node = {**_spec("ref"), "nnodes": 1, "nproc": 2}
    reference = reference_weights(one_node, tmp_path / "reference")
    assert_same_weights(run_dir(settings, job["id"]) / "checkpoints" / f"step_{STEPS:08d}.pt", reference)
