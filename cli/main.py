"""The `rankzero` command: run the service (up, api, worker, scheduler: cli/service_commands.py) and talk to
it over REST (submit, jobs, show, …: cli/job_commands.py). Both register on the one Typer app in cli/app.py.

Only `up` and `api` ever create a token file.
"""

from __future__ import annotations

from cli import service_commands  # registered first: `rankzero --help` lists the service commands first
from cli.app import app

# isort: split
from cli import job_commands

__all__ = ["app", "job_commands", "service_commands"]  # importing the command modules registers them

if __name__ == "__main__":
    app()
