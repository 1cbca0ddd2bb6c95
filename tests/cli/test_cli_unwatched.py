"""`rankzero show` says when nothing has watched a job (issue 35: the REST job's `supervisor_silence`), and says
nothing of it while the job is watched."""

from __future__ import annotations

from rich.console import Console

from cli import views

SILENCE = ("nothing has watched this job for 3 min: the Slurm agent of pool cluster was last seen at "
           "2026-12-07 04:57:00 UTC")  # fmt: skip


def _job(**extra: object) -> dict:
    return {"id": 5, "name": "ddp", "status": "running", "strategy": "DDP 2", "step": 40, "total_steps": 100,
            "latest_loss": 0.5, "created_at": "2026-12-07T05:00:00+00:00", "spec": {}, "pool": "cluster",
            "attempt": 1, **extra}  # fmt: skip


def _printed(job: dict) -> str:
    console = Console(width=200, record=True)
    console.print(views.show_table(job))
    return console.export_text()


def test_show_says_nothing_watches_the_job() -> None:
    out = _printed(_job(supervisor_silent_s=180.0, supervisor_silence=SILENCE))
    line = next(line for line in out.splitlines() if line.split()[:1] == ["unwatched"])
    assert SILENCE in line, out


def test_a_watched_job_has_no_such_line() -> None:
    out = _printed(_job(supervisor_silent_s=None, supervisor_silence=None))
    assert "unwatched" not in out and "nothing has watched" not in out, out
