"""Jobs with their own packages end to end: a live API, a real Celery worker, torchrun in its sandbox running
the environment's interpreter. One worker runs three jobs in turn: the first builds (or finds the session's
entry), a bad requirement fails with uv's message and costs the host nothing, the third starts cached."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.environments.conftest import PACKAGE
from tests.scripts.conftest import _upload, script_spec
from tests.support.services import DEFAULT_SETTINGS, ServiceOptions

SCRIPT = """import importlib.metadata
import pyjokes  # not in the service's environment: from the job's own
import rankzero  # the SDK still imports inside the job's environment
print("pyjokes", importlib.metadata.version("pyjokes"), flush=True)
"""


@pytest.fixture
def service_options() -> ServiceOptions:
    return ServiceOptions(settings=DEFAULT_SETTINGS, fake_trainer=False)


def _project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "train.py").write_text(SCRIPT)
    (root / "requirements.txt").write_text(f"{PACKAGE}\n")
    return root


def _environment(client: Any, job_id: int) -> dict[str, Any]:
    r = client.http.get(f"/jobs/{job_id}/environment")
    r.raise_for_status()
    return r.json()


def _stdout(client: Any, job_id: int) -> str:
    return client.http.get(f"/jobs/{job_id}/logs", params={"rank": 0, "stream": "stdout"}).json()["text"]


def test_jobs_bring_their_packages_and_a_bad_one_costs_the_host_nothing(
    service, workers, environment_dir: Path, tmp_path: Path
) -> None:
    settings, client = service(environment_dir=environment_dir)
    workers.start(settings)
    code = _upload(client, _project(tmp_path))
    env = {"requirements": "requirements.txt"}
    first = client.submit(script_spec("own-packages", code, "train.py", environment=env))
    done = client.wait_terminal(first["id"], timeout=240)
    assert done["status"] == "succeeded", done.get("error")
    assert f"pyjokes {PACKAGE.split('==')[1]}" in _stdout(client, first["id"])
    record = _environment(client, first["id"])
    assert record["state"] == "ready" and {"name": "pyjokes", "version": "0.8.3"} in record["packages"]
    details = [t["detail"] or "" for t in client.job(first["id"])["transitions"]]
    assert any(d.startswith("preparing environment: requirements.txt") for d in details), details
    assert any("environment: 1 package (1 own), " in d for d in details), details

    bad = client.submit(script_spec("bad", code, "train.py", environment={"packages": ["rankzero-no-such-q7x"]}))
    failed = client.wait_terminal(bad["id"], timeout=120)
    assert failed["status"] == "failed", failed
    assert failed["error"].startswith("error: No solution found when resolving dependencies"), failed["error"]
    assert "rankzero-no-such-q7x" in failed["error"]
    assert failed["restarts_used"] == 0 and failed["host_losses"] == 0  # the job's fault, not the host's
    console = client.http.get(f"/jobs/{bad['id']}/console").json()["lines"]  # uv's own words, in the console
    assert any(ln["stream"] == "environment" and "No solution found" in ln["text"] for ln in console), console

    again = client.submit(script_spec("same-set", code, "train.py", environment=env))
    done = client.wait_terminal(again["id"], timeout=240)  # the host runs the next job: it stayed healthy
    assert done["status"] == "succeeded", done.get("error")
    cached = _environment(client, again["id"])
    assert cached["cached"] is True and cached["packages"] == record["packages"]
    assert "$ uv" not in cached["log_tail"]  # no resolution, no build
    print(f"cached start of the same set: {cached['prepare_s'] * 1000:.0f} ms (first: {record['prepare_s']:.2f} s)")
