"""A checkpoint is found wherever it is (issue 35): host-a shares the API's runs dir, host-b has a runs dir of
its own and uploads to the artifact store. A resume (the built-in trainer and a script through the SDK) and a
sweep's extend-best run in both directions between them, the other host drained to force placement, each
ending at the weights of the uninterrupted run and starting past the checkpoint (never from step 0). A resume
whose checkpoint is gone from the store fails before its ranks start, saying why."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.scripts.conftest import script_spec
from tests.support.commands import ROOT
from tests.support.jobs import assert_same_weights, points, reference_weights, slow_spec, wait

CKPT4 = "checkpoints/step_00000004.pt"


def _builtin(name: str, max_steps: int) -> dict[str, Any]:
    return slow_spec(name, step_s=0.0, nproc=1, max_steps=max_steps, every=2, eval_every=4)


def _place_on(client: Any, host: str, other: str) -> None:
    """Only `host` takes new jobs: the other is drained (an operator's drain, through REST)."""
    assert client.http.post(f"/hosts/{host}/undrain").status_code == 200
    assert client.http.post(f"/hosts/{other}/drain", json={"note": "test: placement"}).status_code == 200


def _succeeded_on(client: Any, job_id: int, host: str, timeout: float = 240) -> dict[str, Any]:
    done = client.wait_terminal(job_id, timeout)
    assert done["status"] == "succeeded", (done["error"], done["transitions"])
    assert done["placement"]["nodes"][0]["host"] == host, done["placement"]
    return done


def _final_weights(client: Any, job_id: int, step: int) -> Any:
    """The job's checkpoint at `step`, downloaded from the API (wherever it ran) and checked against its sha256."""
    import hashlib

    import torch

    rows = {c["step"]: c for c in client.http.get(f"/jobs/{job_id}/checkpoints").json()}
    body = wait(lambda: (r := client.http.get(f"/checkpoints/{rows[step]['id']}/download")).status_code == 200 and r,
                60, f"job {job_id}'s step-{step} checkpoint at the API")  # fmt: skip
    assert hashlib.sha256(body.content).hexdigest() == rows[step]["sha256"]
    return torch.load(io.BytesIO(body.content), map_location="cpu", weights_only=True)


def _same_as(got: Any, reference: dict[str, Any], tmp: Path, name: str) -> None:
    import torch

    path = tmp / f"{name}.pt"
    torch.save(got, path)
    assert_same_weights(path, reference)


def _stdout(client: Any, job_id: int) -> str:
    return client.http.get(f"/jobs/{job_id}/logs", params={"rank": 0, "stream": "stdout"}).json()["text"]


def _outputs_weights(client: Any, job_id: int) -> str:
    r = client.http.get(f"/jobs/{job_id}/outputs/file", params={"path": "model/weights.txt"})
    assert r.status_code == 200, r.text
    return r.text


def _by_hand(project: Path, tmp: Path, steps: int) -> str:
    """The script run by hand, start to end (no service: its SDK calls are no-ops)."""
    where = tmp / f"by_hand_{steps}"
    where.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RANKZERO_")}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    subprocess.run([sys.executable, str(project / "train.py"), "--steps", str(steps)], cwd=where, env=env,
                   check=True, capture_output=True, timeout=300)  # fmt: skip
    return (where / "model" / "weights.txt").read_text()


def _resume(client: Any, source: int, name: str, **changes: Any) -> int:
    spec = {**client.job(source)["spec"], "name": name, "resume_from": f"job_{source}/{CKPT4}", **changes}
    made = client.submit(spec)
    assert made["spec"]["resume_from"] == f"job_{source}/{CKPT4}"  # its key, never a host's absolute path
    return int(made["id"])


@pytest.mark.timeout(900)  # a dozen short jobs one phase after another; a loaded machine starts torch slowly
def test_resume_and_extend_best_both_ways_between_a_shared_host_and_a_store_host(
    service, workers, start_host, project, upload, tmp_path: Path
) -> None:
    settings, client = service()
    api_url = str(client.http.base_url).rstrip("/").removesuffix("/api")
    runs_b = tmp_path / "host-b-runs"
    start_host(settings, "host-a", 4)
    own = {"RANKZERO_RUNS_DIR": str(runs_b), "RANKZERO_DATA_DIR": str(tmp_path / "host-b-data")}
    start_host(settings, "host-b", 4, **own, RANKZERO_API_URL=api_url)
    storage = {h["name"]: h["storage"] for h in client.http.get("/hosts").json()}
    assert storage == {"host-a": "shared", "host-b": "store"}
    folder = project("shipper")
    code = upload(client, folder)
    reference = reference_weights(_builtin("ref", 8), tmp_path / "reference")

    # Phase 1, on host-a: a built-in job and a script, 4 steps each.
    _place_on(client, "host-a", "host-b")
    built_a = client.submit(_builtin("built-a", 4))["id"]
    script_a = client.submit(script_spec("script-a", code, "train.py --steps 4"))["id"]
    for job_id in (built_a, script_a):
        _succeeded_on(client, job_id, "host-a")

    # Phase 2, on host-b: the two resumed from host-a's checkpoints (fetched from the store), two new sources,
    # one trial of a sweep, and a resume whose checkpoint is gone from the store.
    _place_on(client, "host-b", "host-a")
    gone = settings.resolved_runs_dir / f"job_{built_a}" / "checkpoints" / "step_00000002.pt"
    gone.unlink()  # the store is the API's runs dir here: host-b can fetch it from nowhere
    missing = client.submit({**client.job(built_a)["spec"], "name": "gone", "max_steps": 8,
                             "resume_from": f"job_{built_a}/checkpoints/step_00000002.pt"})["id"]  # fmt: skip
    resumed_b = _resume(client, built_a, "built-a-resumed", max_steps=8)
    script_resumed_b = _resume(client, script_a, "script-a-resumed", entrypoint="train.py --steps 8")
    built_b = client.submit(_builtin("built-b", 4))["id"]
    script_b = client.submit(script_spec("script-b", code, "train.py --steps 4"))["id"]
    sweep = client.http.post("/sweeps", json={
        "name": "one-trial", "job": {k: v for k, v in _builtin("trial", 4).items() if k != "name"},
        "method": "grid", "metric": "val/loss", "goal": "minimize",
        "parameters": {"optimizer.lr": {"choice": [0.05]}}, "trials": 1, "parallel": 1,
    })  # fmt: skip
    assert sweep.status_code == 201, sweep.text

    failed = client.wait_terminal(missing, 120)
    assert failed["status"] == "failed" and failed["transitions"][-1]["detail"] == "checkpoint unavailable", failed
    assert "is in neither this host's runs dir nor the API's artifact store" in failed["error"], failed["error"]
    assert "running" not in [t["status"] for t in failed["transitions"]]  # no rank ever started
    for job_id in (resumed_b, script_resumed_b, built_b, script_b):
        _succeeded_on(client, job_id, "host-b")
    assert min(points(client, resumed_b)) == 5  # it started past the checkpoint, not from step 0
    _same_as(_final_weights(client, resumed_b, 8), reference, tmp_path, "resumed-b")
    assert "rank 0 starts after step 4" in _stdout(client, script_resumed_b)
    by_hand = _by_hand(folder, tmp_path, 8)
    assert _outputs_weights(client, script_resumed_b) == by_hand
    assert (runs_b / f"job_{built_a}" / CKPT4).is_file()  # fetched into host-b's runs dir, at its key
    detail = wait(lambda: (d := client.http.get(f"/sweeps/{sweep.json()['id']}").json())["status"] == "finished" and d,
                  240, "the sweep's one trial")  # fmt: skip
    trial = detail["trials"][0]["job_id"]
    assert client.job(trial)["placement"]["nodes"][0]["host"] == "host-b"

    # Phase 3, on host-a: host-b's jobs resumed, and the best trial (host-b's) trained longer.
    _place_on(client, "host-a", "host-b")
    resumed_a = _resume(client, built_b, "built-b-resumed", max_steps=8)
    script_resumed_a = _resume(client, script_b, "script-b-resumed", entrypoint="train.py --steps 8")
    extended = client.http.post(f"/sweeps/{sweep.json()['id']}/extend-best", json={"max_steps": 8})
    assert extended.status_code == 201, extended.text
    assert extended.json()["spec"]["resume_from"].startswith(f"job_{trial}/checkpoints/")
    for job_id in (resumed_a, script_resumed_a, extended.json()["id"]):
        _succeeded_on(client, job_id, "host-a")
    assert min(points(client, resumed_a)) == 5
    _same_as(_final_weights(client, resumed_a, 8), reference, tmp_path, "resumed-a")
    assert "rank 0 starts after step 4" in _stdout(client, script_resumed_a)
    assert _outputs_weights(client, script_resumed_a) == by_hand
    extended_spec = {**client.job(extended.json()["id"])["spec"], "resume_from": None, "name": "ref-trial"}
    trial_reference = reference_weights(extended_spec, tmp_path / "trial-reference")
    assert min(points(client, extended.json()["id"])) == 5
    _same_as(_final_weights(client, extended.json()["id"], 8), trial_reference, tmp_path, "extended")


@pytest.mark.timeout(600)
def test_a_two_node_resume_over_hosts_with_separate_runs_dirs_ends_exact(
    service, workers, start_host, tmp_path: Path
) -> None:
    settings, client = service()
    api_url = str(client.http.base_url).rstrip("/").removesuffix("/api")
    start_host(settings, "host-a", 1)
    own = {"RANKZERO_RUNS_DIR": str(tmp_path / "host-b-runs"), "RANKZERO_DATA_DIR": str(tmp_path / "host-b-data")}
    start_host(settings, "host-b", 1, **own, RANKZERO_API_URL=api_url)
    two = {"nproc": 1, "nnodes": 2}
    source = client.submit({**_builtin("two-nodes", 4), **two})["id"]
    done = client.wait_terminal(source, 240)
    assert done["status"] == "succeeded", (done["error"], done["transitions"])
    resumed = _resume(client, source, "two-nodes-resumed", max_steps=8)
    done = client.wait_terminal(resumed, 240)
    assert done["status"] == "succeeded", (done["error"], done["transitions"])
    assert sorted(n["host"] for n in done["placement"]["nodes"]) == ["host-a", "host-b"]
    assert min(points(client, resumed)) == 5
    reference = reference_weights({**_builtin("ref", 8), "nproc": 2}, tmp_path / "reference")
    _same_as(_final_weights(client, resumed, 8), reference, tmp_path, "two-nodes")


@pytest.mark.timeout(600)
def test_a_checkpoint_only_in_s3_is_fetched_by_a_shared_host(service, workers, start_host, s3_server, tmp_path) -> None:
    from tests.storage.conftest import BUCKET, S3_KEYS

    settings, client = service(artifact_store=f"s3://{BUCKET}/rz", s3_endpoint_url=s3_server, **S3_KEYS)
    api_url = str(client.http.base_url).rstrip("/").removesuffix("/api")
    start_host(settings, "host-a", 2, RANKZERO_API_URL=api_url)  # shared; its URL fetches what only S3 holds
    own = {"RANKZERO_RUNS_DIR": str(tmp_path / "host-b-runs"), "RANKZERO_DATA_DIR": str(tmp_path / "host-b-data")}
    start_host(settings, "host-b", 2, **own, RANKZERO_API_URL=api_url)
    _place_on(client, "host-b", "host-a")
    source = client.submit(_builtin("in-s3", 4))["id"]
    _succeeded_on(client, source, "host-b")
    assert not (settings.resolved_runs_dir / f"job_{source}" / CKPT4).exists()  # S3 holds it, not the API's disk

    _place_on(client, "host-a", "host-b")
    resumed = _resume(client, source, "in-s3-resumed", max_steps=8)
    _succeeded_on(client, resumed, "host-a")
    assert min(points(client, resumed)) == 5
    reference = reference_weights(_builtin("ref", 8), tmp_path / "reference")
    _same_as(_final_weights(client, resumed, 8), reference, tmp_path, "s3")
