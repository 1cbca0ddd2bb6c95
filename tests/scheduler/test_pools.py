"""core/pools.py: which pools exist and the submit-time decisions about them (issue 35 part 3), table-driven,
and placement per pool (core/placement.py) with hosts of two pools. No service, no I/O."""

from __future__ import annotations

import pytest

from core.backends import BackendKind
from core.placement import HostView, Waiting, plan
from core.pools import Pools, SlurmPool, UnknownPool, host_may_run, resolve, slurm_fit_refusal, unknown_pool
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
