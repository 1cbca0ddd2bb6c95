"""The `rankzero` command: run the service (up, api, worker, scheduler: cli/service_commands.py) and talk to
it over REST (submit, jobs, show, …: cli/job_commands.py). Both register on the one Typer app in cli/app.py.

Only `up` and `api` ever create a token file.
"""

from __future__ import annotations

from cli import service_commands  # registered first: `rankzero --help` lists the service commands first
from cli.app import app

# isort: split
# Importing a command module registers its commands on `app`: service, then jobs, then each area's own.
from cli import (
    clone_command,  # a copy of a job, its own packages' lock kept (issue 28)
    environment_commands,  # a job's own packages (issue 28)
    job_commands,
    output_commands,  # a job's outputs (issue 22)
    slurm_commands,  # a Slurm pool's agent (issue 26)
    sweep_commands,  # sweeps (issue 24)
    user_commands,  # users, tokens, login profiles, housekeeping (issue 23)
    webhook_commands,  # a user's own webhooks (issue 37)
)

__all__ = [
    "app",
    "clone_command",
    "environment_commands",
    "job_commands",
    "output_commands",
    "service_commands",
    "slurm_commands",
    "sweep_commands",
    "user_commands",
    "webhook_commands",
]

if __name__ == "__main__":
    app()
