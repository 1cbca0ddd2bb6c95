"""What the Slurm agent does with a job in one period, pure: from the row (its rankzero state and attempt) and
Slurm's reading of the job (worker/slurm/states.py) to the steps the agent carries out (worker/slurm/agent.py).

A job's state never contradicts Slurm's (issue 35): a job Slurm requeued is back in rankzero's queue (`queued`,
with Slurm's reason, its Slurm job id kept) until Slurm runs it again; only RUNNING (or a state reached from it)
starts an attempt, never COMPLETING: after a requeue (a node failure, a preemption) the old allocation may still
be completing while the job already waits for nodes, and reading that as the new attempt starting showed a
job `running` that Slurm held PENDING for a dead node. And which node failed is named (`failed_nodes`).
"""

from __future__ import annotations

import enum
import re

from core.tables import JobStatus
from worker.slurm.commands import NodeState
from worker.slurm.states import PENDING_STATES, RUNNING_STATES, Phase, SlurmJob, base_state

S = JobStatus
# How long a requeued job's old allocation may stay COMPLETING before the agent names the requeue without the batch
# step's stop record (it writes one within Slurm's KillWait when its ranks stop on a signal; a node failure, never).
COMPLETING_WAIT_S = 30.0


class Step(enum.Enum):
    wait = "wait"  # nothing is concluded this period (Slurm does not list the job; a stop record may come)
    requeue = "requeue"  # the attempt ended, requeued by Slurm: the row goes back to the queue, with Slurm's reason
    reason = "reason"  # waiting in Slurm's queue: the row carries Slurm's reason
    hold = "hold"  # the old allocation is completing: nothing starts (the row says so and stays as it is)
    claim = "claim"  # a requeued job's new attempt takes the row: queued → starting as attempt `target`
    start = "start"  # its ranks run: starting → running
    follow = "follow"  # running as it was: its events ingested
    unstart = "unstart"  # the row says running but Slurm holds the job waiting: back to the queue
    end = "end"  # Slurm is done with it
    drop = "drop"  # Slurm cancelled the job while it waited in its queue: queued → cancelled, nothing ran


def steps(status: JobStatus, attempt: int, target: int, state: str, phase: Phase, completing_for_s: float = 0.0
          ) -> tuple[Step, ...]:  # fmt: skip
    """The steps, in order, for a row in `status` as `attempt` while Slurm runs (or holds) attempt `target` in
    `state` (its base state: COMPLETING, PENDING, ...) read as `phase`; `completing_for_s`: how long a requeued job's
    old allocation has been completing (its batch step may still write why it stopped). A `queued` row here is one
    waiting in Slurm's queue after a requeue (it keeps its Slurm job id)."""
    if phase is Phase.unknown:
        return (Step.wait,)
    if status is S.cancelling:  # rankzero's cancel is under way: the end is all that matters
        return (Step.end,) if phase is Phase.ended else (Step.follow,)
    if status is S.queued:
        return _waiting(state, phase)
    if target > attempt:  # Slurm restarted the job: the attempt the row follows is over
        if state == "COMPLETING" and completing_for_s < COMPLETING_WAIT_S:
            return (Step.wait,)
        return (Step.requeue, *_waiting(state, phase))
    if phase is Phase.ended:
        return (Step.end,)
    if phase is Phase.pending:
        if status is S.running and state in PENDING_STATES:
            return (Step.unstart,)  # waiting again with no restart seen (never a run Slurm did not start)
        return (Step.reason,) if status is S.starting else (Step.follow,)  # running: PREEMPTED, NODE_FAIL
    if status is S.starting:
        return (Step.hold,) if state == "COMPLETING" else (Step.start, Step.follow)
    return (Step.follow,)


def _waiting(state: str, phase: Phase) -> tuple[Step, ...]:
    """A requeued job in rankzero's queue: it starts only when Slurm runs it (never on the old allocation's
    COMPLETING); an attempt that ran and ended between two periods is claimed, then ended."""
    if phase is Phase.ended:
        return (Step.drop,) if state == "CANCELLED" else (Step.claim, Step.end)
    if state == "COMPLETING":
        return (Step.hold,)
    if phase is Phase.running:
        return (Step.claim, Step.start, Step.follow)
    return (Step.reason,)


def active(listed: dict[str, SlurmJob]) -> list[str]:
    """The Slurm job ids of `listed` (squeue's answer) that Slurm is still working on: waiting or running."""
    return [i for i, job in listed.items() if base_state(job.state) in PENDING_STATES | RUNNING_STATES]


def completing_words(job: SlurmJob, first_attempt: int) -> str:
    """What a requeued job waiting for its old allocation to complete says (never "running")."""
    where = f" on {job.nodes}" if job.nodes.strip() not in ("", "(null)", "None assigned") else ""
    if not job.restarts:  # a first attempt that ran and ends between two periods
        return f"Slurm job {job.job_id}: its allocation{where} is completing"
    again = f"requeued (restart {job.restarts}, attempt {first_attempt + job.restarts})"
    return f"Slurm job {job.job_id}: {again}; waiting for its previous allocation{where} to complete"


# --- which node failed ------------------------------------------------------------------------------------

_GROUP = re.compile(r"([^,\[]*)(?:\[([^\]]*)\])?([^,]*)")


def expand_nodes(hostlist: str) -> list[str]:
    """Slurm's hostlist ("n[1-3,7],gpu01") → its node names, in order ("(null)", "" → none). One bracket per name
    (what Slurm prints for a flat name space)."""
    text = hostlist.strip()
    if text in ("", "(null)", "None assigned", "None"):
        return []
    names: list[str] = []
    for match in _GROUP.finditer(text):
        head, ranges, tail = match.groups()
        if not head and ranges is None:
            continue
        if ranges is None:
            names.append(head + tail)
            continue
        for part in ranges.split(","):
            low, _, high = part.partition("-")
            if not high:
                names.append(f"{head}{low}{tail}")
                continue
            width = len(low) if low.startswith("0") else 0
            names.extend(f"{head}{i:0{width}d}{tail}" for i in range(int(low), int(high) + 1))
    return names


# sinfo's %T for a node that cannot run jobs: down, failing, not responding ("*"), drained after a failure
_UNWELL = ("down", "fail", "drain", "unknown", "no_respond", "power_down")


def failed_nodes(allocation: str, nodes: list[NodeState]) -> list[tuple[str, str]]:
    """The nodes of `allocation` (a job's NodeList) that sinfo shows unwell now, each with Slurm's reason."""
    unwell: dict[str, str] = {}
    for n in nodes:
        state = n.state.lower()
        if state.endswith("*") or any(w in state for w in _UNWELL):
            reason = n.reason if n.reason not in ("", "none") else state
            unwell.setdefault(n.node, reason)
    return [(name, unwell[name]) for name in expand_nodes(allocation) if name in unwell]


def node_failure_words(allocation: str, nodes: list[NodeState]) -> str:
    """ "node n2 failed (Not responding)", or, where sinfo shows none of them unwell, the allocation's nodes."""
    failed = failed_nodes(allocation, nodes)
    if failed:
        named = ", ".join(f"{name} ({why})" for name, why in failed)
        return f"node{'s' if len(failed) > 1 else ''} {named} failed"
    listed = expand_nodes(allocation)
    if not listed:
        return "a node failed (Slurm did not say which)"
    return f"a node of {allocation.strip()} failed" if len(listed) > 1 else f"node {listed[0]} failed"


def node_fail_allocation(records: list[SlurmJob]) -> str | None:
    """The nodes of the job's last allocation that Slurm's accounting ended NODE_FAIL (`sacct -D`: one record per
    requeue, oldest first), or None when none did."""
    for record in reversed(records):
        if base_state(record.state) == "NODE_FAIL":
            return record.nodes
    return None


def node_failure(failed_allocation: str | None, seen: bool, ran_on: str, nodes: list[NodeState]) -> str | None:
    """Whether a requeue followed a node failure, in words naming the node, else None. `failed_allocation`: the
    nodes of the allocation Slurm's accounting ended NODE_FAIL (None: it says none, or accounting is off); `seen`:
    the agent saw NODE_FAIL; `ran_on`: the nodes the attempt ran on (the row's); `nodes`: `sinfo` now. Without
    accounting, Slurm's requeue after a node failure looks like any other (the state the agent sees is COMPLETING,
    then PENDING): a node of the attempt's that `sinfo` shows down or not responding says it."""
    allocation = failed_allocation or ran_on
    if failed_allocation is not None or seen or failed_nodes(allocation, nodes):
        return node_failure_words(allocation, nodes)
    return None
