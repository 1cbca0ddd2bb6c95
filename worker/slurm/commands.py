"""Slurm's command-line tools, the agent's one transport: a small, stable command set (sbatch --parsable,
squeue -O, sacct -P, scancel, scontrol requeue, sinfo), each with a timeout, and pure parsers of their output.

`squeue` lists the agent user's jobs in one call per period (`--me -t all`: finished jobs stay listed until
MinJobAge); a job it does not list is asked of `sacct` (accounting may be off: then it stays unknown).
"""

from __future__ import annotations

import pwd
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from worker.slurm.states import SlurmJob, cancelled_by_uid, exit_status

SQUEUE_FIELDS = (
    "JobID", "State", "Reason", "NodeList", "Partition", "RestartCnt", "StartTime", "exit_code", "UserName",
)  # fmt: skip
SACCT_FIELDS = ("JobID", "State", "Reason", "NodeList", "Partition", "ExitCode", "Start")


class SlurmError(RuntimeError):
    """A Slurm command failed or timed out (its stderr, shortened, says why)."""


@dataclass(frozen=True)
class Runner:
    """Runs Slurm's commands with `env` (SLURM_CONF, say) and a timeout; `prefix` runs them as another user
    (worker/slurm/people.py: `sudo -n -u alice --`)."""

    env: Mapping[str, str] | None = None
    timeout_s: float = 30.0
    prefix: tuple[str, ...] = ()

    def as_user(self, prefix: tuple[str, ...]) -> Runner:
        return replace(self, prefix=prefix)

    def __call__(self, argv: Sequence[str], stdin: str | None = None) -> str:
        try:
            done = subprocess.run(
                [*self.prefix, *argv], input=stdin, env=dict(self.env) if self.env is not None else None,
                capture_output=True, text=True, timeout=self.timeout_s, check=False,
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SlurmError(f"{argv[0]}: {exc}") from None
        if done.returncode != 0:
            raise SlurmError(f"{' '.join(argv[:2])}: {(done.stderr or done.stdout).strip()[-800:] or 'failed'}")
        return done.stdout


def parse_squeue(text: str) -> dict[str, SlurmJob]:
    """`squeue -h -O <SQUEUE_FIELDS with "|" after each>` → job id → SlurmJob (array and het parts kept; the owner's
    user name where the line has it)."""
    found: dict[str, SlurmJob] = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) < len(SQUEUE_FIELDS) - 1 or not parts[0]:
            continue
        job_id, state, reason, nodes, partition, restarts, start, code = parts[:8]
        user = parts[8] if len(parts) > 8 else ""
        found[job_id] = SlurmJob(
            job_id, state, reason, nodes, partition, int(restarts) if restarts.isdigit() else 0, start,
            exit_status(code) if code else None, user=user,
        )  # fmt: skip
    return found


def user_name(uid: int) -> str:
    """The account name of `uid` (the number itself where this host does not know it)."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def parse_sacct(text: str, name_of: Callable[[int], str] = user_name) -> dict[str, SlurmJob]:
    """`sacct -n -P -X -o <SACCT_FIELDS>` → job id → its last record (a requeued job has several); a cancelled
    job's canceller ("CANCELLED by 0") named by `name_of`."""
    found: dict[str, SlurmJob] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < len(SACCT_FIELDS) or not parts[0]:
            continue
        job_id, state, reason, nodes, partition, code, start = parts[: len(SACCT_FIELDS)]
        uid = cancelled_by_uid(state)
        by = name_of(uid) if uid is not None else ""
        found[job_id] = SlurmJob(job_id, state, reason, nodes, partition, 0, start, exit_status(code), by)
    return found


def whose(users: Sequence[str]) -> list[str]:
    """squeue's selection: the agent's own jobs (`--me`), or those of every user named (the agent's own and the
    site's users it submits as: worker/slurm/people.py)."""
    return [f"--user={','.join(users)}"] if users else ["--me"]


def squeue(run: Runner, users: Sequence[str] = ()) -> dict[str, SlurmJob]:
    fmt = ",".join(f"{f}:|" for f in SQUEUE_FIELDS)
    return parse_squeue(run(["squeue", *whose(users), "-h", "-t", "all", "-O", fmt]))


def sacct(run: Runner, job_ids: Iterable[str]) -> dict[str, SlurmJob]:
    """Finished jobs' records; {} when accounting is off (nothing is concluded from that)."""
    ids = sorted(set(job_ids))
    if not ids:
        return {}
    try:
        return parse_sacct(run(["sacct", "-n", "-P", "-X", "-j", ",".join(ids), "-o", ",".join(SACCT_FIELDS)]))
    except SlurmError:
        return {}


def sacct_history(run: Runner, job_id: str) -> list[SlurmJob]:
    """Every record of one job, oldest first (`-D`: a requeued job has one per allocation); [] when accounting is
    off. Which allocation ended NODE_FAIL, and on which nodes (worker/slurm/follow.py)."""
    try:
        out = run(["sacct", "-n", "-P", "-X", "-D", "-j", job_id, "-o", ",".join(SACCT_FIELDS)])
    except SlurmError:
        return []
    records = []
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) >= len(SACCT_FIELDS) and parts[0] == job_id:
            records.append(SlurmJob(job_id, parts[1], parts[2], parts[3], parts[4], 0, parts[6], exit_status(parts[5])))
    return records


def sbatch(run: Runner, script: Path) -> str:
    """Submit `script`; the Slurm job id (`--parsable` prints "id" or "id;cluster")."""
    out = run(["sbatch", "--parsable", str(script)]).strip()
    job_id = out.split(";", 1)[0]
    if not job_id.isdigit():
        raise SlurmError(f"sbatch printed {out!r}, not a job id")
    return job_id


def find_by_name(run: Runner, name: str, users: Sequence[str] = ()) -> str | None:
    """The id of the live job named `name` (one the agent submitted but never recorded) of `users` (`whose`)."""
    out = run(["squeue", *whose(users), "-h", "-n", name, "-O", "JobID:|"])
    ids = [line.split("|")[0].strip() for line in out.splitlines() if line.strip()]
    return ids[0] if ids else None


def scancel(run: Runner, job_id: str, signal: str | None = None) -> None:
    run(["scancel", *([f"--signal={signal}"] if signal else []), job_id])


def requeue(run: Runner, job_id: str) -> None:
    run(["scontrol", "requeue", job_id])


@dataclass(frozen=True)
class NodeState:
    node: str
    partition: str
    state: str
    reason: str
    cpus: str
    gres: str


def parse_sinfo(text: str) -> list[NodeState]:
    nodes = []
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) >= 6:
            nodes.append(NodeState(*(p.strip() for p in parts[:6])))
    return nodes


def sinfo(run: Runner) -> list[NodeState]:
    """Every node of every partition: its state and why (the hosts page of a Slurm pool)."""
    return parse_sinfo(run(["sinfo", "-h", "-N", "-o", "%N|%P|%T|%E|%c|%G"]))


def default_partition(nodes: list[NodeState]) -> str | None:
    """The cluster's default partition: the one `sinfo` marks with '*' (None when it marks none)."""
    return next((n.partition.rstrip("*") for n in nodes if n.partition.endswith("*")), None)
