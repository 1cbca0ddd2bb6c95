"""'Train the best longer' for a sweep of a script (issue 35): the script's length is its own, so it is raised
through its length param (`--steps ${params.steps}`), and the trial goes on from its checkpoint to the new
length, ending at the weights of a run of that length; a script sweep without one is not offered it, and
says why."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.commands import ROOT
from tests.support.jobs import wait


def _sweep(client: Any, code: str, entrypoint: str, params: dict[str, Any]) -> dict[str, Any]:
    body = {
        "name": "script-longer", "job": {"code": code, "entrypoint": entrypoint, "device": "cpu", "params": params},
        "method": "grid", "metric": "loss", "goal": "minimize", "trials": 1, "parallel": 1,
        "parameters": {"params.seed": {"choice": [0]}},
    }  # fmt: skip
    r = client.http.post("/sweeps", json=body)
    assert r.status_code == 201, r.text
    return r.json()


@pytest.mark.timeout(600)
def test_a_script_sweep_trains_longer_through_its_length_param(
    service, workers, start_host, project, upload, tmp_path: Path
) -> None:
    settings, client = service()
    start_host(settings, "host-a", 2)
    folder = project("shipper")
    code = upload(client, folder)

    fixed = _sweep(client, code, "train.py --steps 4", {"seed": 0})
    assert "params.steps" in fixed["extend_refusal"]  # no length param: not offered, saying what to do

    sweep = _sweep(client, code, "train.py --steps ${params.steps}", {"seed": 0, "steps": 4})
    assert sweep["extend_refusal"] is None
    detail = wait(lambda: (d := client.http.get(f"/sweeps/{sweep['id']}").json())["status"] == "finished" and d,
                  240, "the sweep's one trial")  # fmt: skip
    trial = detail["trials"][0]["job_id"]
    assert client.job(trial)["spec"]["entrypoint"] == "train.py --steps 4"

    refused = client.http.post(f"/sweeps/{fixed['id']}/extend-best", json={})
    assert refused.status_code == 409 and "params.steps" in refused.text, refused.text

    r = client.http.post(f"/sweeps/{sweep['id']}/extend-best", json={})
    assert r.status_code == 201, r.text
    longer = r.json()
    assert longer["spec"]["params"]["steps"] == 8 and longer["spec"]["entrypoint"] == "train.py --steps 8"
    assert longer["spec"]["resume_from"] == f"job_{trial}/checkpoints/step_00000004.pt"
    done = client.wait_terminal(longer["id"], 240)
    assert done["status"] == "succeeded", (done["error"], done["transitions"])
    stdout = client.http.get(f"/jobs/{longer['id']}/logs", params={"rank": 0, "stream": "stdout"}).json()["text"]
    assert "rank 0 starts after step 4" in stdout and "step 8 loss" in stdout
    weights = client.http.get(f"/jobs/{longer['id']}/outputs/file", params={"path": "model/weights.txt"}).text

    where = tmp_path / "by_hand"
    where.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RANKZERO_")}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    subprocess.run([sys.executable, str(folder / "train.py"), "--steps", "8"], cwd=where, env=env, check=True,
                   capture_output=True, timeout=300)  # fmt: skip
    assert weights == (where / "model" / "weights.txt").read_text()  # as a run of 8 steps, start to end
