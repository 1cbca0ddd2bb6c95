"""What the Slurm agent does with a job each period (worker/slurm/follow.py), by tables: a requeued job waiting for
nodes is `queued` with Slurm's reason, the old allocation's COMPLETING never starts the new attempt, and the node
that failed is named (sacct's NodeList of the NODE_FAIL record, the nodes `sinfo` shows down)."""

from __future__ import annotations

import pytest

from core.tables import JobStatus
from worker.slurm.commands import NodeState
from worker.slurm.follow import (
    COMPLETING_WAIT_S,
    Step,
    active,
    completing_words,
    expand_nodes,
    failed_nodes,
    node_fail_allocation,
    node_failure,
    node_failure_words,
    steps,
)
from worker.slurm.states import SlurmJob, base_state, read

pytestmark = pytest.mark.xdist_group("slurm")

S = JobStatus
W = Step


def decide(status: JobStatus, attempt: int, state: str, restarts: int, completing_for_s: float = 0.0,
           reason: str = "None") -> tuple[Step, ...]:  # fmt: skip
    """The steps for a row of a job whose first attempt was 1, as Slurm's squeue line reads."""
    slurm = SlurmJob("41", state, reason=reason, nodes="n[1-2]", partition="low", restarts=restarts)
    reading = read(slurm, 1, status is S.cancelling)
    return steps(status, attempt, 1 + restarts, base_state(state), reading.phase, completing_for_s)


@pytest.mark.parametrize(
    ("status", "attempt", "state", "restarts", "completing_for_s", "expected"),
    [
        # a fresh submission: waits in Slurm as `starting`, runs only on RUNNING
        (S.starting, 1, "PENDING", 0, 0, (W.reason,)),
        (S.starting, 1, "CONFIGURING", 0, 0, (W.reason,)),
        (S.starting, 1, "RUNNING", 0, 0, (W.start, W.follow)),
        (S.starting, 1, "COMPLETING", 0, 0, (W.hold,)),  # ran and ends between two periods: not a start
        (S.starting, 1, "COMPLETED", 0, 0, (W.end,)),
        (S.running, 1, "RUNNING", 0, 0, (W.follow,)),
        (S.running, 1, "COMPLETING", 0, 0, (W.follow,)),  # this attempt ending: it ran
        (S.running, 1, "NODE_FAIL", 0, 0, (W.follow,)),  # waiting for Slurm's requeue (or the agent's end)
        (S.running, 1, "PREEMPTED", 0, 0, (W.follow,)),
        (S.running, 1, "FAILED", 0, 0, (W.end,)),
        # the row says running, Slurm holds it waiting with no restart seen: back to the queue
        (S.running, 1, "PENDING", 0, 0, (W.unstart,)),
        (S.running, 1, "REQUEUED", 0, 0, (W.unstart,)),
        # Slurm requeued it (restart count up): the old allocation completing may still write why it stopped
        (S.running, 2, "COMPLETING", 2, 0, (W.wait,)),
        (S.running, 2, "COMPLETING", 2, COMPLETING_WAIT_S + 1, (W.requeue, W.hold)),
        (S.running, 2, "PENDING", 2, 0, (W.requeue, W.reason)),  # after a node failure: queued, Slurm's reason
        (S.running, 2, "REQUEUED", 2, 0, (W.requeue, W.reason)),
        (S.starting, 1, "PENDING", 1, 0, (W.requeue, W.reason)),  # requeued before it was seen running
        (S.running, 1, "RUNNING", 1, 0, (W.requeue, W.claim, W.start, W.follow)),  # already running again
        (S.running, 1, "COMPLETED", 1, 0, (W.requeue, W.claim, W.end)),  # the next attempt ran and ended meanwhile
        # a requeued job in rankzero's queue: never started by the old allocation's COMPLETING
        (S.queued, 2, "COMPLETING", 2, 0, (W.hold,)),
        (S.queued, 2, "PENDING", 2, 0, (W.reason,)),
        (S.queued, 2, "RUNNING", 2, 0, (W.claim, W.start, W.follow)),
        (S.queued, 2, "CANCELLED", 2, 0, (W.drop,)),  # the site's scancel while it waited: nothing ran
        (S.queued, 2, "FAILED", 2, 0, (W.claim, W.end)),  # ran and failed between two periods
        (S.queued, 2, "NODE_FAIL", 2, 0, (W.reason,)),  # not a run: the next requeue is awaited
        # rankzero's cancel under way: only its end matters
        (S.cancelling, 1, "RUNNING", 0, 0, (W.follow,)),
        (S.cancelling, 1, "PENDING", 1, 0, (W.follow,)),
        (S.cancelling, 1, "CANCELLED", 0, 0, (W.end,)),
    ],
)
def test_steps(status: JobStatus, attempt: int, state: str, restarts: int, completing_for_s: float,
               expected: tuple[Step, ...]) -> None:  # fmt: skip
    assert decide(status, attempt, state, restarts, completing_for_s) == expected


def test_a_job_slurm_does_not_list_is_left_as_it_is() -> None:
    for status in (S.starting, S.running, S.queued, S.cancelling):
        reading = read(None, 1, False)
        assert steps(status, 1, 1, "", reading.phase) == (W.wait,)


def test_a_requeued_job_waiting_for_nodes_reads_slurms_reason() -> None:
    reason = "Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions"
    slurm = SlurmJob("41", "PENDING", reason=reason, partition="low", restarts=2)
    assert read(slurm, 1, False).words == (
        f"Slurm job 41: requeued (restart 2, attempt 3); waiting in Slurm's queue ({reason})"
    )
    completing = SlurmJob("41", "COMPLETING", nodes="n[1-2]", partition="low", restarts=2)
    assert completing_words(completing, 1) == (
        "Slurm job 41: requeued (restart 2, attempt 3); waiting for its previous allocation on n[1-2] to complete"
    )
    assert "running" not in completing_words(completing, 1)


@pytest.mark.parametrize(
    ("hostlist", "names"),
    [
        ("n[1-3]", ["n1", "n2", "n3"]),
        ("n[1-2,7],gpu01", ["n1", "n2", "n7", "gpu01"]),
        ("gpu[08-10]", ["gpu08", "gpu09", "gpu10"]),
        ("n1,n2", ["n1", "n2"]),
        ("n[1-2]-ib", ["n1-ib", "n2-ib"]),
        ("(null)", []),
        ("", []),
        ("None assigned", []),
    ],
)
def test_expand_nodes(hostlist: str, names: list[str]) -> None:
    assert expand_nodes(hostlist) == names


def node(name: str, state: str, reason: str = "none") -> NodeState:
    return NodeState(name, "low*", state, reason, "2", "(null)")


@pytest.mark.parametrize(
    ("allocation", "nodes", "words"),
    [
        ("n[1-2]", [node("n1", "mixed"), node("n2", "down*", "Not responding")], "node n2 (Not responding) failed"),
        ("n[1-2]", [node("n1", "idle*"), node("n2", "allocated")], "node n1 (idle*) failed"),
        ("n[1-3]", [node("n1", "down", "crashed"), node("n3", "drained", "Kill task failed")],
         "nodes n1 (crashed), n3 (Kill task failed) failed"),
        ("n[1-2]", [node("n1", "idle"), node("n2", "idle")], "a node of n[1-2] failed"),  # back already
        ("n2", [], "node n2 failed"),
        ("", [node("n2", "down*")], "a node failed (Slurm did not say which)"),
        ("n1", [node("n2", "down*")], "node n1 failed"),  # another job's node down: not this one's
    ],
)  # fmt: skip
def test_the_failed_node_is_named(allocation: str, nodes: list[NodeState], words: str) -> None:
    assert node_failure_words(allocation, nodes) == words


def test_failed_nodes_keeps_the_allocations_order() -> None:
    nodes = [node("n3", "down*", "Not responding"), node("n1", "fail", "bad disk")]
    assert failed_nodes("n[1-3]", nodes) == [("n1", "bad disk"), ("n3", "Not responding")]


@pytest.mark.parametrize(
    ("records", "allocation"),
    [
        ([("REQUEUED", "n[1-2]"), ("NODE_FAIL", "n[2-3]"), ("PENDING", "None assigned")], "n[2-3]"),
        ([("NODE_FAIL", "n1"), ("REQUEUED", "n[1-2]"), ("RUNNING", "n[1-2]")], "n1"),
        ([("PREEMPTED", "n[1-2]"), ("PENDING", "None assigned")], None),
        ([], None),
    ],
)
def test_node_fail_allocation(records: list[tuple[str, str]], allocation: str | None) -> None:
    found = [SlurmJob("41", state, nodes=nodes) for state, nodes in records]
    assert node_fail_allocation(found) == allocation


DOWN_N2 = [node("n1", "mixed"), node("n2", "down*", "Not responding")]


@pytest.mark.parametrize(
    ("failed_allocation", "seen", "ran_on", "nodes", "words"),
    [
        ("n[1-2]", False, "n[1-2]", DOWN_N2, "node n2 (Not responding) failed"),  # accounting says NODE_FAIL
        (None, True, "n[1-2]", DOWN_N2, "node n2 (Not responding) failed"),  # the agent saw NODE_FAIL
        (None, False, "n[1-2]", DOWN_N2, "node n2 (Not responding) failed"),  # no accounting: a node is down now
        (None, True, "n[1-2]", [node("n1", "idle"), node("n2", "idle")], "a node of n[1-2] failed"),  # back already
        (None, False, "n[1-2]", [node("n1", "idle"), node("n2", "idle")], None),  # an admin's requeue, say
        (None, False, "n1", DOWN_N2, None),  # another job's node is down: not this one's failure
        (None, False, "", [], None),
    ],
)
def test_a_requeue_after_a_node_failure_names_the_node(failed_allocation: str | None, seen: bool, ran_on: str,
                                                       nodes: list[NodeState], words: str | None) -> None:  # fmt: skip
    assert node_failure(failed_allocation, seen, ran_on, nodes) == words


def test_active_lists_what_slurm_still_works_on() -> None:
    states = (("1", "PENDING"), ("2", "RUNNING"), ("3", "COMPLETING"), ("4", "CANCELLED by 0"), ("5", "COMPLETED"))
    listed = {i: SlurmJob(i, state) for i, state in states}
    assert active(listed) == ["1", "2", "3"]
