"""What the Slurm agent hands an attempt of a script job (its own variables) and reads from it (its printed
metrics): as a worker on rankzero's own hosts does (worker/launch.py, worker/console_feed.py)."""

from __future__ import annotations

from pydantic import ValidationError

from trainer.run_dir import RunDir
from trainer.spec import JobSpec
from worker.console_feed import ConsoleFeed
from worker.script_jobs import script_job_env


def console_feed(run: RunDir, attempt: int, raw_spec: dict) -> ConsoleFeed | None:
    """A script job's console feed (None for the built-in trainer, or a spec that no longer validates)."""
    try:
        spec = JobSpec.model_validate(raw_spec)
    except ValidationError:
        return None
    feed = ConsoleFeed(run, attempt, spec)
    return feed if feed.enabled else None


def script_env(spec_dict: dict) -> dict[str, str]:
    """A script job's own variables (world size, accumulation): as worker/launch.py gives them."""
    values = script_job_env(spec_dict, ())
    out = {}
    if values.get("world_size"):
        out["RANKZERO_WORLD_SIZE"] = str(values["world_size"])
    if values.get("accumulation_steps"):
        out["RANKZERO_ACCUMULATION_STEPS"] = str(values["accumulation_steps"])
    return out
