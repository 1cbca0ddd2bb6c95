"""`rankzero submit --follow` / `rankzero follow`: a live progress bar with the latest loss and the ETA, until the
job ends; while it is queued, its place in its pool's queue and estimated start (issue 38), live in the bar and
printed above it whenever the queue moves."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

from cli.client import Api
from cli.views import finished_states, queue_place


def _eta(seconds: float | None) -> str:
    if seconds is None:
        return "--:--"
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def waiting_note(job: dict[str, Any], said: str | None) -> str | None:
    """A line to print above the bar when a queued job's reason for waiting is new (a quota, no free host):
    before, a held job's bar sat at "queued" with nothing saying why. None: nothing new to say."""
    reason = job.get("pending_reason") if job.get("status") == "queued" else None
    if not reason or reason == said:
        return None
    return reason


def queue_key(job: dict[str, Any]) -> tuple[int, str] | None:
    """What makes a queued job's estimate news (its place, what it waits on); the countdown alone is not, or
    a line would print every poll. None: no estimate (started, placed, or an older server)."""
    est = job.get("start_estimate") if job.get("status") == "queued" else None
    return (int(est["position"]), str(est["why"])) if est else None


def queue_note(job: dict[str, Any], said: tuple[int, str] | None) -> str | None:
    """The line to print above the bar when the queued job's place or what it waits on changed since `said`
    (`queue_key` of the last line printed): '#1 in its pool, starts in ~2:05 (when job 12 ends)'. None: no news."""
    key = queue_key(job)
    if key is None or key == said:
        return None
    return queue_place(job["start_estimate"])


def follow(api: Api, job_id: int, console: Console, poll_s: float = 0.5) -> dict[str, Any]:
    """Poll the job until it is terminal, drawing step / total, loss and ETA; return the final job."""
    columns = (
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TaskProgressColumn(),
        TextColumn("loss [cyan]{task.fields[loss]}"), TextColumn("ETA {task.fields[eta]}"),
        TextColumn("[dim]{task.fields[status]}"), TimeElapsedColumn(), TextColumn("[dim]{task.fields[queue]}"),
    )  # fmt: skip
    finished = finished_states()
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task(f"job {job_id}", total=None, loss="-", eta="--:--", status="queued", queue="")
        said: str | None = None
        placed: tuple[int, str] | None = None  # the queue place last printed
        while True:
            job = api.get(f"/jobs/{job_id}")
            if (note := waiting_note(job, said)) is not None:
                said = note
                progress.console.print(f"job {job_id} waits: {note}", markup=False, highlight=False, soft_wrap=True)
            if (place := queue_note(job, placed)) is not None:
                placed = queue_key(job)
                progress.console.print(f"job {job_id} queued: {place}", markup=False, highlight=False, soft_wrap=True)
            est = job.get("start_estimate") if job["status"] == "queued" else None
            loss = job.get("latest_loss")
            progress.update(
                task,
                total=job.get("total_steps") or None,
                completed=job.get("step") or 0,
                loss=f"{loss:.4f}" if isinstance(loss, (int, float)) else "-",
                eta=_eta(job.get("eta_s")),
                status=job["status"],
                queue=escape(queue_place(est)) if est else "",  # updated every poll: the countdown moves
            )
            if job["status"] in finished:
                return job
            time.sleep(poll_s)
