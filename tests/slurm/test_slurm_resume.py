"""A Slurm attempt's `resume_from` (worker/slurm/prepare.py): the API stores another job's checkpoint as a key
relative to the runs dir; the batch step resolves it in the shared runs dir, or fails before `srun` saying why,
and a script's ranks get it as RANKZERO_RESUME_FROM (worker/slurm/rank.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from worker.slurm import prepare, rank

pytestmark = pytest.mark.xdist_group("slurm")

RUNS = Path("/shared/runs")
KEY = "job_5/checkpoints/step_40.pt"
OWN = Path("/shared/runs/job_9/checkpoints/step_80.pt")


@pytest.mark.parametrize(
    ("given", "newest", "own", "present", "path", "error"),
    [
        # nothing to resume from: a fresh start
        (None, None, False, set(), None, None),
        ("", None, False, set(), None, None),
        # the run's own newest checkpoint wins over the spec's (a requeued built-in run)
        (KEY, OWN, True, set(), str(OWN), None),
        (None, OWN, True, set(), str(OWN), None),
        # attempt 1 of a job resuming another: the key, resolved in the runs dir the nodes share
        (KEY, None, False, {RUNS / KEY}, str(RUNS / KEY), None),
        # an older spec's absolute path, kept
        (str(RUNS / KEY), None, False, {RUNS / KEY}, str(RUNS / KEY), None),
        # gone before the first attempt: fail before srun, never start from scratch
        (KEY, None, False, set(), None, "is not in this Slurm pool's runs dir"),
        (str(RUNS / KEY), None, False, set(), None, "is not in this Slurm pool's runs dir"),
        # a script with a checkpoint of its own no longer needs it (load_checkpoint prefers its own)
        (KEY, None, True, set(), None, None),
        # a key that climbs out of the runs dir
        ("../elsewhere/step_1.pt", None, False, {RUNS.parent / "elsewhere/step_1.pt"}, None, "not a checkpoint"),
    ],
)
def test_resume_for_attempt(
    given: str | None, newest: Path | None, own: bool, present: set[Path], path: str | None, error: str | None
) -> None:
    decision = prepare.resume_for_attempt(given, newest, own, RUNS, lambda p: p in present)
    assert decision.path == path
    if error is None:
        assert decision.error is None
    else:
        assert decision.error is not None and error in decision.error


def _run(tmp_path: Path, resume_from: str | None) -> Path:
    root = tmp_path / "runs" / "job_9"
    root.mkdir(parents=True)
    (root / prepare.BASE_SPEC).write_text(json.dumps({"steps": 10, "resume_from": resume_from}))
    return root


@pytest.mark.parametrize("script", [False, True])
def test_prepare_resolves_the_key_in_the_shared_runs_dir(tmp_path: Path, script: bool) -> None:
    root = _run(tmp_path, KEY)
    checkpoint = tmp_path / "runs" / KEY
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(b"weights")
    argv = ["--run-dir", str(root), "--attempt", "1", "--ranks", "2", *(["--script"] if script else [])]
    assert prepare.main(argv) == 0
    written = json.loads((root / "spec.json").read_text())
    assert written["resume_from"] == str(checkpoint.resolve())
    assert rank.script_resume_env(str(root)) == {"RANKZERO_RESUME_FROM": str(checkpoint.resolve())}


def test_prepare_fails_before_srun_when_the_checkpoint_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _run(tmp_path, KEY)
    assert prepare.main(["--run-dir", str(root), "--attempt", "1", "--ranks", "1"]) == 1
    assert "cannot continue from it" in capsys.readouterr().err
    assert not (root / "spec.json").exists()


def test_a_fresh_run_gets_no_resume_variable(tmp_path: Path) -> None:
    root = _run(tmp_path, None)
    assert prepare.main(["--run-dir", str(root), "--attempt", "1", "--ranks", "1", "--script"]) == 0
    assert json.loads((root / "spec.json").read_text())["resume_from"] is None
    assert rank.script_resume_env(str(root)) == {}
