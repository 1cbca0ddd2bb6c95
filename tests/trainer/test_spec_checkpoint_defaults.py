"""`checkpoint: {every_steps: N}` means by steps only: the epoch default (1) must not add saves that
keep_last then counts against the step checkpoints the user asked for."""

from __future__ import annotations

from trainer.spec import CheckpointSpec, JobSpec


def test_every_steps_alone_turns_the_epoch_default_off() -> None:
    c = CheckpointSpec(every_steps=100)
    assert c.every_steps == 100 and c.every_epochs is None
    assert c.model_fields_set == {"every_steps"}  # a default, not something the user set


def test_the_epoch_default_stays_without_every_steps_and_both_given_both_apply() -> None:
    assert CheckpointSpec().every_epochs == 1
    assert CheckpointSpec(every_steps=None).every_epochs == 1
    assert CheckpointSpec(every_steps=100, every_epochs=2).every_epochs == 2
    assert CheckpointSpec(every_steps=100, every_epochs=1).every_epochs == 1


def test_a_job_spec_from_yaml_like_data_keeps_only_step_saves_and_round_trips() -> None:
    spec = JobSpec.model_validate({"max_steps": 300, "checkpoint": {"every_steps": 100, "keep_last": 2}})
    assert spec.checkpoint.every_epochs is None
    again = JobSpec.model_validate(spec.model_dump(mode="json"))
    assert again.checkpoint.every_epochs is None and again.checkpoint.every_steps == 100
