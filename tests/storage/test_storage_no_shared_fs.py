"""A host without the API's runs dir is a normal host (issue 22): host-b, a worker with a runs dir and a
data dir of its own and RANKZERO_API_URL, runs a script job whose console, checkpoints and outputs the
API serves from what host-b shipped; host-b is then killed (worker and ranks), and the job resumes on
host-a (which shares the API's runs dir) from host-b's last checkpoint and ends at the weights of an
uninterrupted run."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from tests.scripts.conftest import script_spec
from tests.support.commands import ROOT
from tests.support.jobs import wait
from tests.support.procs import job_processes, kill_all


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _stdout(client: Any, job_id: int) -> str:
    return client.http.get(f"/jobs/{job_id}/logs", params={"rank": 0, "stream": "stdout"}).json()["text"]


def _run_by_hand(project: Path, tmp_path: Path) -> tuple[subprocess.Popen[bytes], Path]:
    """The script run by hand, start to end (no service: its SDK calls are no-ops), beside the job."""
    where = tmp_path / "by_hand"
    where.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RANKZERO_")}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, str(project / "train.py"), "--steps", "8"], cwd=where, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    return proc, where / "model" / "weights.txt"


@pytest.mark.timeout(600)  # ~1 min on a quiet machine; a loaded one starts torch far slower
def test_a_host_without_the_shared_runs_dir_runs_ships_and_is_resumed_elsewhere(
    service, workers, start_host, project, upload, tmp_path: Path
) -> None:
    settings, client = service()
    api_url = str(client.http.base_url).rstrip("/").removesuffix("/api")
    folder = project("shipper")
    code = upload(client, folder)
    by_hand, by_hand_weights = _run_by_hand(folder, tmp_path)
    runs_b = tmp_path / "host-b-runs"
    own = {"RANKZERO_RUNS_DIR": str(runs_b), "RANKZERO_DATA_DIR": str(tmp_path / "host-b-data")}
    host_b = start_host(settings, "host-b", 2, **own, RANKZERO_API_URL=api_url)
    storage = {h["name"]: (h["storage"], h["storage_note"]) for h in client.http.get("/hosts").json()}
    assert storage["host-b"] == ("store", "uploads to the store")

    spec = script_spec("no-shared-fs", code, "train.py --steps 8 --wait-after 4", checkpoint={"keep_last": 2})
    job_id = client.submit(spec)["id"]
    # The console, checkpoints and outputs come from the API, shipped by host-b as they were written.
    wait(lambda: "waiting" in _stdout(client, job_id), 120, "host-b's console to reach the API")
    assert "step 4 loss" in _stdout(client, job_id)
    rows = wait(lambda: [c for c in client.http.get(f"/jobs/{job_id}/checkpoints").json() if c["step"] == 4], 60,
                "the step-4 checkpoint")  # fmt: skip
    ckpt = wait(lambda: (r := client.http.get(f"/checkpoints/{rows[0]['id']}/download")).status_code == 200 and r, 60,
                "the step-4 checkpoint to be uploaded")  # fmt: skip
    assert _sha(ckpt.content) == rows[0]["sha256"]
    assert (runs_b / f"job_{job_id}" / "checkpoints" / "step_00000004.pt").is_file()  # host-b's own copy
    assert client.job(job_id)["placement"]["nodes"][0]["host"] == "host-b"

    def four_losses() -> Any:
        files = {f["path"]: f for f in client.http.get(f"/jobs/{job_id}/outputs").json()["files"]}
        return "plots/loss.txt" in files and files["plots/loss.txt"]["bytes"] > 0 and files

    outputs = wait(four_losses, 60, "the loss plot among the outputs")
    assert "train.py" not in outputs  # the links to the bundle are not outputs
    loss = client.http.get(f"/jobs/{job_id}/outputs/file", params={"path": "plots/loss.txt"})
    assert loss.status_code == 200 and _sha(loss.content) == loss.headers["X-Content-SHA256"]

    # host-b dies: its worker and its ranks (the machine is gone). host-a takes the job over.
    workers.stop(host_b)
    kill_all([p.pid for p in job_processes(workers.marker, job_id)])
    start_host(settings, "host-a", 2)
    done = client.wait_terminal(job_id, timeout=180)
    assert done["status"] == "succeeded", done
    assert done["placement"]["nodes"][0]["host"] == "host-a" and done["attempt"] >= 2
    assert "rank 0 starts after step 4" in _stdout(client, job_id)  # host-b's last checkpoint

    listing = {f["path"]: f for f in client.http.get(f"/jobs/{job_id}/outputs").json()["files"]}
    weights = client.http.get(f"/jobs/{job_id}/outputs/file", params={"path": "model/weights.txt"})
    assert _sha(weights.content) == listing["model/weights.txt"]["sha256"]
    assert by_hand.wait(timeout=120) == 0
    assert weights.text == by_hand_weights.read_text()  # exact, across the two hosts
    archive = client.http.get(f"/jobs/{job_id}/outputs/archive", params={"folder": "model", "format": "tar"})
    with tarfile.open(fileobj=io.BytesIO(archive.content)) as tar:
        members = {m.name: _sha(tar.extractfile(m).read()) for m in tar.getmembers()}  # type: ignore[union-attr]
    assert members == {"model/weights.txt": listing["model/weights.txt"]["sha256"]}
