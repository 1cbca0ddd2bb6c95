"""core/pools.py: which pools exist and the submit-time decisions about them (issue 35 part 3), table-driven,
and placement per pool (core/placement.py) with hosts of two pools. No service, no I/O."""

from __future__ import annotations

import pytest

from core.backends import BackendKind
from core.placement import HostView, NodeUse, Team, Usage, Waiting, plan
from core.pools import (
    Pools,
    SlurmPool,
    UnknownPool,
    host_may_run,
    resolve,
    slurm_fit_refusal,
    slurm_usage,
    unknown_pool,
)
from core.quotas import Quota
from core.team_pass import held_after
from trainer.spec import JobSpec

POOLS = Pools(
    default="rankzero",
    hosts=frozenset({"gpu-a", "cpu-b"}),
    slurm={"cluster": SlurmPool("cluster", "low", {"low": 2, "high": 4})},
)


@pytest.mark.parametrize(
    ("asked", "runs_in"),
    [
        (None, "rankzero"),  # no pool: the API's RANKZERO_QUEUE
        ("rankzero", "rankzero"),  # the default exists before any host registers for it
        ("gpu-a", "gpu-a"),  # a pool some host registered for
        ("cluster", "cluster"),  # a Slurm pool its agent registered
    ],
)
def test_a_pool_that_exists_is_where_the_job_runs(asked: str | None, runs_in: str) -> None:
    assert resolve(asked, POOLS) == runs_in
    assert unknown_pool(runs_in, POOLS) is None


@pytest.mark.parametrize(
    ("asked", "nearest"),
    [
        ("cpu-bx", "cpu-b"),
        ("clusterr", "cluster"),
        ("gpu_a", "gpu-a"),
        ("elsewhere", None),  # nothing near: the names alone
    ],
)
def test_an_unknown_pool_is_refused_naming_the_pools_and_the_nearest(asked: str, nearest: str | None) -> None:
    why = unknown_pool(asked, POOLS)
    assert why is not None and why.startswith(
        f"no pool {asked!r}: the pools are 'cluster', 'cpu-b', 'gpu-a', 'rankzero'"
    )
    assert (f"did you mean {nearest!r}?" in why) if nearest else ("did you mean" not in why)
    with pytest.raises(UnknownPool, match="the pools are"):
        resolve(asked, POOLS)


@pytest.mark.parametrize(
    ("name", "backend"),
    [("cluster", BackendKind.slurm), ("gpu-a", BackendKind.hosts), ("rankzero", BackendKind.hosts)],
)
def test_a_pools_backend(name: str, backend: BackendKind) -> None:
    assert POOLS.backend(name) is backend


@pytest.mark.parametrize(
    ("pool", "fields", "refused"),
    [
        (POOLS.slurm["cluster"], {"nnodes": 2}, None),  # the pool's partition 'low' has 2 nodes
        (POOLS.slurm["cluster"], {"nnodes": 3}, "partition 'low' of Slurm pool 'cluster' has 2"),
        (POOLS.slurm["cluster"], {"nnodes": 4, "slurm": {"partition": "high"}}, None),  # the job's own partition
        (POOLS.slurm["cluster"], {"nnodes": 5, "slurm": {"partition": "high"}}, "partition 'high' of Slurm pool"),
        (POOLS.slurm["cluster"], {"nnodes": 9, "slurm": {"partition": "gpu"}}, None),  # not seen: Slurm decides
        (SlurmPool("solo", None, {"only": 1}), {"nnodes": 2}, "partition 'only' of Slurm pool 'solo' has 1"),
        (SlurmPool("fresh"), {"nnodes": 64}, None),  # its agent has not listed the nodes yet
        (SlurmPool("two", None, {"a": 1, "b": 8}), {"nnodes": 4}, None),  # Slurm's default not known: not judged
    ],
)
def test_a_slurm_pools_capacity_is_its_partitions(pool: SlurmPool, fields: dict, refused: str | None) -> None:
    why = slurm_fit_refusal(JobSpec.model_validate({"max_steps": 5, **fields}), pool)
    assert (why is None) if refused is None else (why is not None and refused in why and "lower nnodes" in why)


@pytest.mark.parametrize(
    ("host_pool", "job_pool", "runs"),
    [("gpu-a", "gpu-a", True), ("gpu-a", "cpu-b", False), ("cpu-b", "gpu-a", False), ("gpu-a", None, True)],
)
def test_a_host_runs_only_its_own_pools_jobs(host_pool: str, job_pool: str | None, runs: bool) -> None:
    assert host_may_run(host_pool, job_pool) is runs


def test_placement_puts_each_pools_jobs_on_its_own_hosts_only() -> None:
    hosts = [
        HostView(name="a1", pool="gpu-a", gpus=("0", "1"), cpu_slots=8, storage_id="s"),
        HostView(name="b1", pool="cpu-b", gpus=(), cpu_slots=8, storage_id="s"),
    ]
    spec = JobSpec.model_validate({"max_steps": 5, "device": "cpu", "nproc": 2})
    waiting = [
        Waiting(1, "cpu-b", 0, 1.0, spec),
        Waiting(2, "gpu-a", 0, 2.0, spec),
        Waiting(3, "cluster", 0, 3.0, spec),
    ]
    p = plan(waiting, hosts, [])
    where = {x.job_id: [n.host for n in x.nodes] for x in p.placements}
    assert where == {1: ["b1"], 2: ["a1"]}
    assert p.pending[3] == "no host serves pool 'cluster'"
    # pool B's host full: its job waits, never on pool A's free host
    p = plan(
        [Waiting(4, "cpu-b", 0, 4.0, JobSpec.model_validate({"max_steps": 5, "device": "cpu", "nproc": 9}))], hosts, []
    )
    assert p.placements == [] and "pool 'cpu-b'" in p.pending[4]


# --- quotas and fair share count across pools -----------------------------------------------------------


def _two_pools() -> list[HostView]:
    return [
        HostView(name="a1", pool="gpu-a", gpus=("0", "1"), cpu_slots=8, storage_id="s"),
        HostView(name="b1", pool="gpu-b", gpus=("0", "1"), cpu_slots=8, storage_id="s"),
    ]


def _gpu_job(job_id: int, pool: str, owner: int, created: float) -> Waiting:
    spec = JobSpec.model_validate({"max_steps": 5, "device": "cuda", "nproc": 1})
    return Waiting(job_id, pool, 0, created, spec, owner=owner)


def test_a_gpu_quota_counts_what_she_holds_in_every_pool() -> None:
    """Her 2 GPUs held in pool gpu-a leave nothing of her quota of 2 for a job in pool gpu-b."""
    held = [Usage(50, 0, False, (NodeUse("a1", ("0", "1"), 0),), owner=1)]
    team = Team(quotas={1: Quota("ann", max_gpus=2)})
    p = plan([_gpu_job(1, "gpu-b", owner=1, created=1.0)], _two_pools(), held, team)
    assert p.placements == [] and "quota" in p.pending[1]
    assert plan([_gpu_job(1, "gpu-b", owner=1, created=1.0)], _two_pools(), [], team).placements  # nothing held


def test_fair_share_counts_what_she_holds_in_another_pool() -> None:
    """One free GPU in pool gpu-b, two users at equal priority: the one holding GPUs in pool gpu-a goes second,
    though her job is older."""
    held = [
        Usage(50, 0, False, (NodeUse("a1", ("0", "1"), 0),), owner=1),
        Usage(51, 0, False, (NodeUse("b1", ("0",), 0),), owner=3),
    ]
    jobs = [_gpu_job(1, "gpu-b", owner=1, created=1.0), _gpu_job(2, "gpu-b", owner=2, created=2.0)]
    p = plan(jobs, _two_pools(), held, Team(half_life_s=3600.0))
    assert [x.job_id for x in p.placements] == [2] and 1 in p.pending
    owed = held_after(held, p.placements, jobs)
    assert owed == {1: 2.0, 3: 1.0, 2: 1.0}  # her usage is charged for every pool's GPUs


@pytest.mark.parametrize(
    ("sinfo", "default"),
    [
        ("n1|low*|idle|none|2|(null)\nn1|high|idle|none|2|(null)\n", "low"),
        ("n1|low|idle|none|2|(null)\nn1|high*|idle|none|2|(null)\n", "high"),
        ("n1|low|idle|none|2|(null)\n", None),  # no default marked: the API judges a lone partition as it
        ("", None),
    ],
)
def test_the_agent_registers_slurms_default_partition(sinfo: str, default: str | None) -> None:
    from worker.slurm.commands import default_partition, parse_sinfo

    assert default_partition(parse_sinfo(sinfo)) == default


@pytest.mark.parametrize(
    ("fields", "gpus", "slots"),
    [
        ({"device": "cuda", "nproc": 4, "nnodes": 2}, 8, 0),
        ({"device": "cpu", "nproc": 3, "nnodes": 2}, 0, 6),
        ({"device": "auto", "nproc": 2}, 0, 2),  # the agent's GPUs per rank are not known here: a core each
    ],
)
def test_a_running_slurm_job_counts_for_its_owner(fields: dict, gpus: int, slots: int) -> None:
    """A Slurm pool's running job holds units of its owner's quota and fair share, on no host of rankzero's."""
    use = slurm_usage(7, 0, JobSpec.model_validate({"max_steps": 5, **fields}), "cluster", owner=1)
    assert use.owner == 1 and not use.preemptible and {n.host for n in use.nodes} == {"slurm:cluster"}
    assert (sum(len(n.gpus) for n in use.nodes), sum(n.slots for n in use.nodes)) == (gpus, slots)
    # held on Slurm, it counts against her GPU quota in a hosts pool; the hosts' capacity is untouched
    p = plan([_gpu_job(1, "gpu-b", owner=1, created=1.0)], _two_pools(), [use], Team(quotas={1: Quota("ann", 2)}))
    assert bool(p.placements) is (gpus + 1 <= 2)
    assert held_after([use], [], []) == {1: float(gpus + slots)}
