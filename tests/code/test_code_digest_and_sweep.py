"""The digest `rankzero submit --code` prints is one the API accepts as it is, and `rankzero sweep FILE --code
DIR` uploads the folder as submit does (issue 35), against a live API."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import httpx
import yaml

from core.settings import Settings
from tests.support.commands import RANKZERO, ROOT
from tests.support.jobs import DIGITS_SPEC
from tests.support.settings import API_TOKEN


def _cli(url: str, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RANKZERO_URL": url, "RANKZERO_API_TOKEN": API_TOKEN, "COLUMNS": "200",
           "XDG_CACHE_HOME": str(tmp / "cache")}  # fmt: skip
    return subprocess.run([RANKZERO, *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)


def test_the_printed_digest_is_accepted_and_a_sweep_uploads_its_code(
    settings: Settings, live_api, project: Path, tmp_path: Path
) -> None:
    url = live_api(settings)
    job = {**DIGITS_SPEC, "nproc": 1, "model": {"name": "mypkg.models:build"}}
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump(job))
    submitted = _cli(url, tmp_path, "submit", str(spec), "--code", str(project))
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    printed = re.search(r"sha256:[0-9a-f]+", submitted.stdout)
    assert printed is not None and len(printed.group(0)) == len("sha256:") + 64, submitted.stdout

    # The digest as printed, copied into a spec: accepted as it is.
    api = httpx.Client(base_url=f"{url}/api", headers={"Authorization": f"Bearer {API_TOKEN}"}, timeout=30)
    again = api.post("/jobs", json={**job, "name": "copied-digest", "code": printed.group(0)})
    assert again.status_code == 201, again.text

    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({
        "name": "with-code", "job": job, "method": "grid", "metric": "val/loss",
        "parameters": {"optimizer.lr": {"choice": [0.01, 0.1]}}, "trials": 2, "parallel": 1,
    }))  # fmt: skip
    started = _cli(url, tmp_path, "sweep", str(sweep), "--code", str(project))
    assert started.returncode == 0, started.stdout + started.stderr
    assert "sweep" in started.stdout and "started" in started.stdout
    sweep_id = int(re.search(r"sweep (\d+) started", started.stdout).group(1))  # type: ignore[union-attr]
    assert api.get(f"/sweeps/{sweep_id}").json()["spec"]["job"]["code"] == printed.group(0)
    # --code goes with a spec file only.
    refused = _cli(url, tmp_path, "sweep", "show", str(sweep_id), "--code", str(project))
    assert refused.returncode == 2 and "--code" in refused.stderr
