"""A script job's rank under `srun` runs the user's script in the process that `python -m worker.slurm.rank`
started (worker/slurm/rank.py): a project with a `worker` package of its own must import its own, not ours.
No Slurm is needed: the rank's script path is run as the batch script would, in a process of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from worker.slurm.rank import LAUNCH_FILE

pytestmark = pytest.mark.xdist_group("slurm")

ROOT = Path(__file__).resolve().parents[2]


def test_a_projects_own_worker_package_is_the_one_its_script_imports(tmp_path: Path) -> None:
    project, run = tmp_path / "project", tmp_path / "run"
    (project / "worker").mkdir(parents=True)
    run.mkdir()
    (project / "worker" / "__init__.py").write_text("WHOSE = 'the project'\n")
    (project / "worker" / "helpers.py").write_text('def helper():\n    return "the project\'s helper"\n')
    seen = tmp_path / "seen"
    (project / "train.py").write_text(
        "import worker\nfrom worker.helpers import helper\n"
        f"open({str(seen)!r}, 'w').write(worker.WHOSE + ' / ' + helper())\n"
    )
    (run / LAUNCH_FILE).write_text(json.dumps({"argv": ["train.py"], "cwd": str(project)}))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RANKZERO_RUN_DIR": str(run)}
    env |= {"SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NTASKS": "1", "SLURM_JOB_NUM_NODES": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "worker.slurm.rank"],
        env=env,
        cwd=run,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )  # fmt: skip  (as the batch script starts a rank)
    assert done.returncode == 0, done.stderr
    assert seen.read_text() == "the project / the project's helper"
