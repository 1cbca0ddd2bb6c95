"""A real Slurm for the Slurm backend's tests (tests/slurm/cluster.py), one per session, and an agent per test.

The cluster is skipped only when apt cannot install slurm-wlm (the reason is the skip's message)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from core.db import get_engine
from core.migrate import upgrade
from tests.slurm import cluster as slurm
from tests.support import procs
from worker.slurm.agent import Agent
from worker.slurm.commands import Runner


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[slurm.SlurmCluster]:
    reason = slurm.install_reason()
    if reason is not None:
        pytest.skip(reason)
    # munged wants every folder above its socket traversable by all (pytest's base temp folder is 0700).
    root = Path(tempfile.mkdtemp(prefix="rankzero-slurm-"))
    root.chmod(0o755)
    try:
        running = slurm.start(root)
        try:
            yield running
        finally:
            running.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def slurm_env(slurm_cluster: slurm.SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """This process's environment pointed at the test cluster (the agent and its jobs inherit it)."""
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    return {**os.environ}


@pytest.fixture
def slurm_settings(api_settings: Callable[..., Any], slurm_env: dict[str, str], request: pytest.FixtureRequest) -> Any:
    """Settings of a Slurm pool of this test's own (its name keeps Slurm job names apart between tests)."""
    pool = "slurm-" + "".join(c for c in request.node.name if c.isalnum())[-40:]
    return api_settings(slurm_pool=pool, slurm_partition="low", slurm_poll_s=0.3, slurm_signal_margin_s=60)


@pytest.fixture
def marker(monkeypatch: pytest.MonkeyPatch) -> str:
    """Every process of this test's jobs carries it (the agent hands RANKZERO_TEST_RUN to the ranks)."""
    value = procs.new_marker()
    monkeypatch.setenv(procs.MARKER_ENV, value)
    return value


@pytest.fixture
def agent(slurm_settings: Any, slurm_cluster: slurm.SlurmCluster, marker: str) -> Iterator[Agent]:
    upgrade(slurm_settings.resolved_database_url)
    made = Agent(get_engine(slurm_settings.resolved_database_url), slurm_settings, Runner(env=slurm_cluster.env))
    try:
        yield made
    finally:  # nothing of this test stays in Slurm's queue for the next one
        out = slurm_cluster.run("squeue", "--me", "-h", "-o", "%i %j", check=False)
        mine = [line.split()[0] for line in out.splitlines() if f"rankzero-{slurm_settings.slurm_pool}-" in line]
        if mine:
            slurm_cluster.run("scancel", *mine, check=False)
        procs.end_everything(marker)


def run_dir(settings: Any, job_id: int) -> Path:
    return Path(settings.resolved_runs_dir) / f"job_{job_id}"
