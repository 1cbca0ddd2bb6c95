"""A script whose console prints `iter N: loss X` has a `loss` series, not train/loss: the job page's result
named its final loss "train/loss" all the same."""

from __future__ import annotations

from tests.support.rows import bulk_points, seed_job


def test_the_result_names_a_console_loss_loss(page, web_service, db) -> None:
    job = seed_job(db, "console-loss", "succeeded", runs_dir=web_service.runs_dir, total_steps=30)
    job.spec = {**job.spec, "entrypoint": "train.py"}
    db.add(job)
    db.commit()
    assert job.id is not None
    bulk_points(db, job.id, "loss", 30)
    page.goto(f"{web_service.base}/jobs/{job.id}")
    page.wait_for_selector("#chart-loss[data-points]")
    page.wait_for_selector("#job-outcome-values [data-metric='loss']")  # the result is drawn as the series arrives
    labels = page.locator("#job-outcome-values dt").all_inner_texts()
    assert "loss" in labels and "train/loss" not in labels, labels
