"""The new-job form shows only the fields that apply (Adam settings for Adam/AdamW, elastic min_nproc
for nproc > 1 on one host, nothing of the built-in trainer for a script job), offers built-in models
and data sets as pick lists, says what is wrong in words, and leaves hidden fields out of the spec."""

from __future__ import annotations

import json

from tests.support.browser import shot


def test_form_shows_what_applies_and_says_errors_in_words(page, web_service) -> None:
    page.goto(f"{web_service.base}/new")
    page.wait_for_selector("#job-form[data-ready]")
    visible = lambda sel: page.locator(sel).is_visible()  # noqa: E731

    # SGD (the preset): momentum, no betas. AdamW: betas and eps, no momentum or nesterov.
    assert visible("#f-optimizer-momentum") and not visible("#f-optimizer-betas")
    page.select_option("#f-optimizer-name", "adamw")
    assert visible("#f-optimizer-betas") and visible("#f-optimizer-eps")
    assert not visible("#f-optimizer-momentum") and not visible("#f-optimizer-nesterov")
    # Cosine: its floor; step: its period and factor.
    assert not visible("#f-scheduler-min-lr-ratio")
    page.select_option("#f-scheduler-name", "step")
    assert visible("#f-scheduler-step-size") and not visible("#f-scheduler-min-lr-ratio")

    # Elastic fit only with several ranks on one host.
    assert not visible("#f-min-nproc")
    page.fill("#f-nproc", "4")
    assert visible("#f-min-nproc")
    page.fill("#f-nnodes", "2")
    assert not visible("#f-min-nproc")
    page.fill("#f-nnodes", "1")

    # Pick lists for the built-ins; "your own code" opens a text field.
    options = page.locator("#f-model-name-pick option").all_inner_texts()
    assert {"mlp", "convnet", "resnet18", "resnet50"} <= set(options)
    assert "cifar10" in page.locator("#f-data-name-pick option").all_inner_texts()
    assert not visible("#f-model-name")
    page.select_option("#f-model-name-pick", "convnet")
    page.select_option("#f-model-name-pick", "__custom__")
    assert visible("#f-model-name")
    page.fill("#f-model-name", "mypkg.models:build")
    page.select_option("#f-model-name-pick", "convnet")

    # The name's rule in words as you type, not a regex.
    page.fill("#f-name", "bad name!")
    error = page.locator("#f-name-error")
    error.wait_for(state="visible")
    assert "letters, digits" in error.inner_text() and "^" not in error.inner_text()
    page.fill("#f-name", "fields-ok")
    assert not error.is_visible()
    shot(page, "form-fields-adamw", full_page=True)

    # What is hidden is not submitted: the raw editor shows the spec that would go.
    page.click("#tab-raw")
    spec = json.loads(page.locator("#raw-spec").input_value())
    assert spec["optimizer"]["name"] == "adamw" and "momentum" not in spec["optimizer"]
    assert spec["model"]["name"] == "convnet" and spec["nproc"] == 4 and "min_nproc" in spec
    assert "min_lr_ratio" not in spec["scheduler"]
    page.click("#tab-form")

    # A script job: the built-in trainer's settings go away.
    page.fill("#f-entrypoint", "train.py --epochs 1")
    assert not visible("#f-optimizer-lr") and not visible("#f-batch-size") and not visible("#f-model-name-pick")
    assert visible("#f-nproc") and visible("#f-code")
    shot(page, "form-fields-script", full_page=True)
