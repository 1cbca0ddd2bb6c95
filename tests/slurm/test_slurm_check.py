"""`rankzero slurm-agent --check` (worker/slurm/check.py): what srun says turned into sentences, by table, and the
real command against the test cluster: ready as this machine is set up; a clear sentence when the service's Python
is one the agent's user cannot run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.slurm.cluster import SlurmCluster
from tests.support.settings import settings_env
from worker.slurm.check import FAIL_LINE, OK_LINE, verdict

pytestmark = pytest.mark.xdist_group("slurm")
ROOT = Path(__file__).resolve().parents[2]
DENIED = "slurmstepd-n1: error: execve(): /shared/py/bin/python: Permission denied\nsrun: error: n1: task 0: Exited"


@pytest.mark.parametrize(
    ("code", "output", "ok", "words"),
    [
        (0, f"{OK_LINE} node n1: fine\n{OK_LINE} node n2: fine\n", True, "ok: node n1: fine"),
        (2, DENIED, False, "cannot run the service's Python /shared/py/bin/python as rz (permission denied)"),
        (2, DENIED.replace("Permission denied", "No such file or directory"), False, "(it is not there)"),
        (1, f"{OK_LINE} node n1: fine\n{FAIL_LINE} node n2: the runs dir /r is not writable\n", False,
         "FAILED: node n2: the runs dir /r is not writable"),
        (0, f"{OK_LINE} node n1: fine\n", False, "srun exited 0 with 1 of 2 nodes checked"),
    ],
)  # fmt: skip
def test_verdict(code: int, output: str, ok: bool, words: str) -> None:
    got = verdict("/shared/py/bin/python", "rz", code, output, 2)
    assert got.ok is ok
    assert any(words in line for line in got.lines), got.lines


def check(settings: Any, cluster: SlurmCluster, **extra: str) -> subprocess.CompletedProcess[str]:
    env = settings_env(settings, SLURM_CONF=str(cluster.conf), PYTHONPATH=str(ROOT), COLUMNS="400", **extra)
    argv = [sys.executable, "-m", "cli.main", "slurm-agent", "--check", "--nodes", "2"]
    return subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.slow
def test_check_passes_on_a_ready_cluster_and_names_a_python_the_user_cannot_run(
    slurm_settings: Any, slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    Path(slurm_settings.resolved_runs_dir).mkdir(parents=True, exist_ok=True)
    done = check(slurm_settings, slurm_cluster)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("ok: node n") == 2 and "port " in done.stdout and "open between nodes" in done.stdout
    assert "ready for rankzero's jobs" in done.stdout
    # A Python the agent's user cannot run: not executable (root reads anything, but runs only what has an x bit).
    python = tmp_path / "shared" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    os.chmod(python, 0o644)
    done = check(slurm_settings, slurm_cluster, RANKZERO_SLURM_PYTHON=str(python))
    said = done.stdout + done.stderr
    assert done.returncode == 1, said
    assert f"the compute nodes cannot run the service's Python {python} as " in said, said
    assert "(permission denied)" in said and "readable and searchable" in said, said
