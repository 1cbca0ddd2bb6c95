"""The pool in the CLI (issue 35 part 3): a column of `rankzero jobs`, a line of `rankzero show`."""

from __future__ import annotations

import pytest
from rich.console import Console

from cli import views


def _job(job_id: int, pool: str | None, name: str = "digits-ddp") -> dict:
    return {"id": job_id, "name": name, "status": "queued", "strategy": "DDP 2", "step": 0, "total_steps": 20,
            "latest_loss": None, "created_at": "2026-12-07T05:00:00+00:00", "spec": {}, "pool": pool}  # fmt: skip


def _printed(table: object, width: int) -> str:
    console = Console(width=width, record=True)
    console.print(table)
    return console.export_text()


@pytest.mark.parametrize(
    ("jobs", "width", "shown"),
    [
        ([_job(1, "cluster"), _job(2, "gpu-boxes")], 80, True),  # two pools: always, the names give way
        ([_job(1, "rankzero"), _job(2, "rankzero")], 120, True),  # one pool, room enough: shown
        ([_job(1, "rankzero", "a-long-job-name-x"), _job(2, "rankzero")], 60, False),  # one pool, no room: the name
    ],
)
def test_the_jobs_table_has_a_pool_column(jobs: list[dict], width: int, shown: bool) -> None:
    out = _printed(views.jobs_table(jobs, width), width)
    header = next(line for line in out.splitlines() if line.strip().startswith("id"))
    assert ("pool" in header.split()) is shown, out
    assert all(len(line) <= width for line in out.splitlines()), out
    if shown:
        assert all(j["pool"][:6] in out for j in jobs), out


def test_show_names_the_pool() -> None:
    out = _printed(views.show_table({**_job(3, "cluster"), "attempt": 0}), 100)
    assert any(line.split()[:2] == ["pool", "cluster"] for line in out.splitlines()), out
