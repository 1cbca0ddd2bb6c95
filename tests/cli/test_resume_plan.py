"""core/resume.py: the spec of a resume trains past its checkpoint (max_steps counts from step 0)."""

from __future__ import annotations

from core.resume import resume_spec

SPEC = {"name": "run", "max_steps": 300, "epochs": None, "batch_size": 16}


def _plan(spec=SPEC, **kw):
    kw.setdefault("resume_from", "job_1/checkpoints/step_00000300.pt")
    return resume_spec(spec, **kw)


def test_a_finished_run_trains_as_long_again() -> None:
    spec, note = _plan(total_steps=300, checkpoint_step=300)
    assert spec["max_steps"] == 600 and spec["name"] == "run-resume" and "300 more steps" in note
    assert spec["resume_from"] == "job_1/checkpoints/step_00000300.pt" and spec["batch_size"] == 16


def test_a_run_stopped_early_goes_on_to_its_end() -> None:
    spec, note = _plan(total_steps=300, checkpoint_step=120)
    assert spec["max_steps"] == 300 and "original end" in note


def test_a_resumed_run_counts_its_own_length_from_where_it_started() -> None:
    resumed = {**SPEC, "resume_from": "/runs/job_1/checkpoints/step_00000100.pt"}
    spec, _ = _plan(resumed, total_steps=300, checkpoint_step=300)
    assert spec["max_steps"] == 500  # it trained 100 → 300: 200 more


def test_an_epochs_run_gets_max_steps_and_no_epochs_once_extended() -> None:
    spec, _ = _plan({"name": "ep", "epochs": 2}, total_steps=80, checkpoint_step=80)
    assert spec["max_steps"] == 160 and spec["epochs"] is None
    spec, note = _plan({"name": "ep", "epochs": 2}, total_steps=None, checkpoint_step=80)
    assert "max_steps" not in spec and "epochs" in note


def test_max_steps_given_wins_and_zero_steps_is_warned() -> None:
    spec, note = _plan(total_steps=300, checkpoint_step=300, max_steps=450)
    assert spec["max_steps"] == 450 and "warning" not in note
    spec, note = _plan(total_steps=300, checkpoint_step=300, max_steps=300)
    assert spec["max_steps"] == 300 and "0 steps" in note
