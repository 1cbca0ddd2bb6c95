"""The form follows the spec's checkpoint rule as you type: every_steps alone saves by steps only."""

from __future__ import annotations


def test_every_steps_alone_empties_the_default_every_epochs(page, web_service) -> None:
    page.goto(f"{web_service.base}/new")
    page.wait_for_selector("#job-form[data-ready]")
    page.select_option("#preset", "mnist-convnet")  # a preset that leaves the checkpoint at its defaults
    assert page.locator("#f-checkpoint-every-epochs").input_value() == "1"
    page.fill("#f-checkpoint-every-steps", "100")
    assert page.locator("#f-checkpoint-every-epochs").input_value() == ""
    page.fill("#f-checkpoint-every-steps", "")
    assert page.locator("#f-checkpoint-every-epochs").input_value() == "1"
    page.fill("#f-checkpoint-every-epochs", "2")  # the user's own value stays
    page.fill("#f-checkpoint-every-steps", "100")
    assert page.locator("#f-checkpoint-every-epochs").input_value() == "2"
