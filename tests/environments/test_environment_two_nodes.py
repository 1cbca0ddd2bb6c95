"""A 2-node job with its own packages (issue 28): each host prepares the environment in its own cache, from
the one lock node 0 resolved, so both ranks import the same version."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.cluster.conftest import start_host  # noqa: F401  (the fixture: workers posing as hosts)
from tests.environments.conftest import PACKAGE
from tests.scripts.conftest import _upload, script_spec
from tests.support.services import DEFAULT_SETTINGS, ServiceOptions

SCRIPT = """import importlib.metadata, os
import pyjokes  # from the job's own environment, on each host
print("rank", os.environ["RANK"], "pyjokes", importlib.metadata.version("pyjokes"), flush=True)
"""


@pytest.fixture
def service_options() -> ServiceOptions:
    return ServiceOptions(settings=DEFAULT_SETTINGS, fake_trainer=False)


def _stdout(client: Any, job_id: int, rank: int) -> str:
    return client.http.get(f"/jobs/{job_id}/logs", params={"rank": rank, "stream": "stdout"}).json()["text"]


def test_both_nodes_run_the_one_lock_from_their_own_caches(
    service,
    start_host,  # noqa: F811 (the fixture imported above)
    environment_dir: Path,
    tmp_path: Path,
) -> None:
    settings, client = service(environment_dir=environment_dir)
    host_b_cache = tmp_path / "host-b-environments"  # host-b has a cache of its own: it installs, never resolves
    start_host(settings, "host-a", 1)
    start_host(settings, "host-b", 1, RANKZERO_ENVIRONMENT_DIR=str(host_b_cache))
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(SCRIPT)
    code = _upload(client, project)
    job = client.submit(
        script_spec("two-nodes-own-packages", code, "train.py", nnodes=2, nproc=1, environment={"packages": [PACKAGE]})
    )
    done = client.wait_terminal(job["id"], timeout=300)
    assert done["status"] == "succeeded", done.get("error")
    version = PACKAGE.split("==")[1]
    assert f"rank 0 pyjokes {version}" in _stdout(client, job["id"], 0)
    assert f"rank 1 pyjokes {version}" in _stdout(client, job["id"], 1)
    assert any(host_b_cache.rglob("pyjokes")), "host-b prepared the environment in its own cache"
