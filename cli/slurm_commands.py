"""`rankzero slurm-agent`: hand one pool's jobs to an existing Slurm cluster (docs/slurm.md), and
`rankzero slurm-nodes`: that cluster's partitions and node states (`sinfo`)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cli.app import app, console, fail, load_settings


@app.command("slurm-agent")
def slurm_agent(
    pool: Annotated[str | None, typer.Option(help="The pool to hand to Slurm (default RANKZERO_SLURM_POOL).")] = None,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Verify from compute nodes (through srun) that the service's Python runs as this user, the runs "
            "dir is writable and the rendezvous ports are open between nodes; then exit.",
        ),
    ] = False,
    nodes: Annotated[int, typer.Option(help="How many nodes --check runs on (2: ports between nodes).", min=1)] = 2,
) -> None:
    """Run on a login node (Slurm's commands, the shared runs dir): submit the pool's queued jobs with sbatch,
    follow them with one squeue per period, ingest their run dirs, cancel with scancel."""
    import logging
    import signal
    import threading

    from core.db import get_engine
    from core.migrate import upgrade
    from worker.slurm.agent import Agent
    from worker.slurm.commands import Runner

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    settings = load_settings(**({"slurm_pool": pool} if pool else {}))
    if check:
        _check(settings, nodes)
        return
    if settings.slurm_pool is None:
        fail("name the pool to hand to Slurm: --pool NAME or RANKZERO_SLURM_POOL", code=2)
    upgrade(settings.resolved_database_url)
    agent = Agent(
        get_engine(settings.resolved_database_url), settings, Runner(timeout_s=settings.slurm_command_timeout_s)
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    console.print(f"slurm agent: pool {settings.slurm_pool}, every {settings.slurm_poll_s:g} s")
    agent.run_forever(stop)


def _check(settings: Any, nodes: int) -> None:
    """`slurm-agent --check`: one task per node runs `python -m worker.slurm.check` with the pool's Python."""
    import getpass
    import subprocess
    import sys

    from worker.slurm import people
    from worker.slurm.bounds import port_range
    from worker.slurm.check import srun_argv, verdict
    from worker.slurm.commands import Runner

    python = settings.slurm_python or sys.executable
    runs = settings.slurm_runs_dir or settings.resolved_runs_dir
    argv = srun_argv(python, runs, nodes, settings.slurm_partition, *port_range(settings))
    console.print(f"checking {nodes} node(s) of partition {settings.slurm_partition or '(default)'}: {' '.join(argv)}")
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        fail(f"srun did not run: {exc}", code=1)
    result = verdict(python, getpass.getuser(), done.returncode, done.stdout + done.stderr, nodes)
    # With a user map: the agent may submit as each mapped user, and shares the runs dir with them.
    mapped = people.check_lines(settings, Runner(timeout_s=settings.slurm_command_timeout_s))
    for line in [*result.lines, *mapped]:
        console.print(line, markup=False, highlight=False)
    if not result.ok or any(line.startswith("FAILED") for line in mapped):
        fail("the compute nodes are not ready for rankzero's jobs (above: what to change)", code=1)
    console.print("the compute nodes are ready for rankzero's jobs")


@app.command("slurm-nodes")
def slurm_nodes() -> None:
    """Partitions and node states of the Slurm cluster (`sinfo`), as the hosts page shows them."""
    from worker.slurm.commands import Runner, SlurmError, sinfo

    settings = load_settings()
    try:
        nodes = sinfo(Runner(timeout_s=settings.slurm_command_timeout_s))
    except SlurmError as exc:
        fail(str(exc), code=1)
    for n in nodes:
        console.print(f"{n.partition:<12} {n.node:<16} {n.state:<12} cpus={n.cpus} gres={n.gres} {n.reason}")
