"""The batch script of one rankzero job: pure, from a `BatchJob` to the text `sbatch` reads.

A rank that exits lets its peers finish for `rank_exit_wait_s` (srun `--wait`), then srun ends them.
The gang is `-N nnodes` × `--ntasks-per-node nproc` (× `--gpus-per-node`); every rank is a task started
by `srun` directly (never torchrun: its agent dies on Slurm's warning signal), running
`python -m worker.slurm.rank`, which takes RANK / LOCAL_RANK / WORLD_SIZE from SLURM_PROCID / SLURM_LOCALID /
SLURM_NTASKS. MASTER_ADDR is the address of the first host of the allocation, MASTER_PORT derived from
the job id and restart count.

Signals: `--signal=USR1@margin` warns every rank before the time limit (and on preemption, with
`preempt_send_user_signal`); the ranks checkpoint and exit 75. The script then asks Slurm why
(worker/slurm/stopped.py) and requeues its own job only after a preemption (with GraceTime a preempted job that
exits cleanly is not requeued by Slurm) or the time-limit warning; never after a cancel, rankzero's (a marker file
the agent writes before `scancel`) or anyone's. The shell traps TERM so
that Slurm's signal to the batch step never ends the script before `exit $rc`: the job's state is what
the ranks said, never an `echo`'s.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

# The trainer's "stopped after saving a checkpoint; resumable" (trainer/exit_codes.py EXIT_STOPPED).
EXIT_STOPPED = 75
CANCEL_MARK = "slurm_cancel_requested"  # in the run dir: written by the agent before `scancel`
PORT_BASE, PORT_SPAN = 20000, 20000
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# A Slurm name (partition, account, QOS): what `sbatch` would take; no spaces, quotes or shell words.
SLURM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def job_name(pool: str, job_id: int, attempt: int) -> str:
    """The Slurm job name of attempt `attempt` of rankzero job `job_id` of `pool`: the agent finds a job it
    submitted but did not record (it died between `sbatch` and the write) by this name."""
    return f"rankzero-{pool}-{int(job_id)}-{int(attempt)}"


def batch_log(run_root: Path) -> Path:
    """The batch step's output (every restart appends): the launcher log that errors.diagnose reads."""
    return run_root / "logs" / "slurm_batch.log"


@dataclass(frozen=True)
class BatchJob:
    """Everything the batch script says. Validated by `check`; `render` turns it into text."""

    pool: str
    job_id: int
    first_attempt: int  # the attempt number of Slurm restart 0; restart r is first_attempt + r
    run_root: Path
    python: str  # the interpreter on the compute nodes
    nnodes: int
    ntasks_per_node: int
    gpus_per_node: int = 0
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_limit_min: int = 60
    signal_margin_s: int = 120
    nice: int | None = None
    extra_options: tuple[str, ...] = ()  # sbatch options the admin allowed (settings), verbatim
    env: dict[str, str] = field(default_factory=dict)  # exported to every rank
    script: bool = False  # a user's script (spec entrypoint): no resume_from is written for it
    # After the first rank exits, the others get this long before srun ends them (`--wait`). Not
    # --kill-on-bad-exit: a rank that checkpointed and exited 75 would have its peers killed mid-checkpoint.
    rank_exit_wait_s: int = 120
    port_base: int = PORT_BASE  # MASTER_PORT is drawn from [port_base, port_base + port_span): the site's firewall
    port_span: int = PORT_SPAN
    # A job submitted as a site user (worker/slurm/people.py) writes in a run dir the agent's user reads and cleans
    # up through a shared group: its files group-writable (0007), as the run dir is (setgid, 2770).
    umask: int | None = None

    def check(self) -> None:  # noqa: C901 (one test per field, in order)
        """Raise ValueError naming the first field that cannot go into a batch script."""
        if not SLURM_NAME.match(self.pool):
            raise ValueError(f"pool {self.pool!r} is not a Slurm name (letters, digits, '.', '_', '-')")
        if not 1 <= self.nnodes <= 1024 or not 1 <= self.ntasks_per_node <= 256:
            raise ValueError("nnodes must be 1..1024 and ntasks_per_node 1..256")
        if not 0 <= self.gpus_per_node <= 64:
            raise ValueError("gpus_per_node must be 0..64")
        for what, value in (("partition", self.partition), ("account", self.account), ("qos", self.qos)):
            if value is not None and not SLURM_NAME.match(value):
                raise ValueError(f"{what} {value!r} is not a Slurm name (letters, digits, '.', '_', '-')")
        if not 1 <= self.time_limit_min <= 525_600:
            raise ValueError("time_limit_min must be 1..525600 (a year)")
        if not 1 <= self.rank_exit_wait_s <= 3600:
            raise ValueError("rank_exit_wait_s must be 1..3600")
        if not (self.port_base >= 1024 and self.port_span >= 1 and self.port_base + self.port_span <= 65_536):
            raise ValueError("the rendezvous port range must lie within 1024..65535")
        if not 10 <= self.signal_margin_s <= 65_535:  # Slurm's --signal takes at most 65535 s
            raise ValueError("signal_margin_s must be 10..65535")
        if self.umask is not None and not 0 <= self.umask <= 0o777:
            raise ValueError("umask must be 0..0o777")
        for name in self.env:
            if not _ENV_NAME.match(name):
                raise ValueError(f"environment variable name {name!r} is not a plain shell name")
        for option in self.extra_options:
            if "\n" in option or not option.startswith("--"):
                raise ValueError(f"sbatch option {option!r} must be one line starting with '--'")


def directives(job: BatchJob) -> list[str]:
    """The `#SBATCH` lines (`--export=NONE`: the agent's own environment, its database URL and token
    included, never reaches a job; what the ranks need is exported by the script)."""
    opts = [
        f"--job-name={job_name(job.pool, job.job_id, job.first_attempt)}",
        f"--nodes={job.nnodes}",
        f"--ntasks-per-node={job.ntasks_per_node}",
        f"--time={job.time_limit_min}",
        "--requeue",
        f"--signal=USR1@{job.signal_margin_s}",
        f"--output={batch_log(job.run_root)}",
        "--open-mode=append",
        "--export=NONE",
        f"--chdir={job.run_root}",
    ]
    if job.gpus_per_node:
        opts.append(f"--gpus-per-node={job.gpus_per_node}")
    opts += [f"--{k}={v}" for k, v in (("partition", job.partition), ("account", job.account), ("qos", job.qos)) if v]
    if job.nice is not None:
        opts.append(f"--nice={job.nice}")
    opts += list(job.extra_options)
    return [f"#SBATCH {shlex.quote(o)}" for o in opts]


def render(job: BatchJob) -> str:
    """The whole batch script."""
    job.check()
    q = shlex.quote
    root, py = q(str(job.run_root)), q(job.python)
    logs = q(str(job.run_root / "logs"))
    exports = [f"export {name}={q(value)}" for name, value in sorted(job.env.items())]
    prepare = [
        py,
        "-m",
        "worker.slurm.prepare",
        "--run-dir",
        root,
        "--attempt",
        '"$attempt"',
        "--ranks",
        '"$SLURM_NTASKS"',
    ]
    if job.script:
        prepare.append("--script")
    lines = [
        "#!/bin/bash",
        *directives(job),
        "# Generated by rankzero (worker/slurm/script.py). The job's state is the ranks' exit status.",
        "set -u",
        *([f"umask {job.umask:04o}"] if job.umask is not None else []),
        # Slurm signals the batch step too (cancel, preemption): note it, and go on to `exit $rc`.
        "trap 'echo \"rankzero: batch step got a stop signal\"' TERM USR1",
        *exports,
        f"attempt=$(( {job.first_attempt} + ${{SLURM_RESTART_COUNT:-0}} ))",
        'export RANKZERO_ATTEMPT="$attempt"',
        'first_host=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        "MASTER_ADDR=$(scontrol show node \"$first_host\" -o | tr ' ' '\\n' | sed -n 's/^NodeAddr=//p')",
        'export MASTER_ADDR="${MASTER_ADDR:-$first_host}"',
        f"export MASTER_PORT=$(( {job.port_base} + (SLURM_JOB_ID * 8 + ${{SLURM_RESTART_COUNT:-0}}) "
        f"% {job.port_span} ))",
        f'echo "rankzero: attempt $attempt of job {job.job_id} on $SLURM_JOB_NODELIST '
        '(restart ${SLURM_RESTART_COUNT:-0})"',
        " ".join(prepare) + " || exit $?",
        f'logs={logs}/attempt_"$attempt"',
        # A stop signal sent while a rank's interpreter starts (before its handlers) would kill it: the ranks
        # start with SIGTERM and SIGUSR1 blocked, pending until worker/slurm/rank.py handles them (coreutils ≥ 8.31).
        "guard=; env --block-signal=USR1 true 2>/dev/null && guard='env --block-signal=USR1 --block-signal=TERM'",
        f'srun --wait={job.rank_exit_wait_s} --export=ALL --output="$logs/%t/stdout.log" --error="$logs/%t/stderr.log" '
        f"$guard {py} -m worker.slurm.rank",
        "rc=$?",
        'echo "rankzero: ranks exited $rc" ',
        # Why they stopped decides whether the job comes back (worker/slurm/stopped.py: only a preemption or the
        # time-limit warning is requeued by the script; a cancel by anyone is final).
        f'if [ "$rc" -eq {EXIT_STOPPED} ]; then',
        f"  {py} -m worker.slurm.stopped --run-dir {root} --margin {job.signal_margin_s} || "
        'echo "rankzero: could not tell why the ranks stopped: not requeued"',
        "fi",
        "exit $rc",
    ]
    return "\n".join(lines) + "\n"
