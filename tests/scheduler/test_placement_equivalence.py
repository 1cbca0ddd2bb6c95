"""The indexed placement pass (core/placement.py `plan`) decides exactly what today's full pass
(tests/scheduler/placement_reference.py `plan_reference`) decides, on random clusters and queues (issue 29).

Hypothesis is not pinned in the test extras, so the cases come from a seeded generator: many small
clusters (few hosts, so that jobs collide: gangs, elastic fits, reservations, preemption and quotas all
happen) and fewer big ones. Each case compares the whole plan (placements in order, every pending
reason, preemptions, reservations) and checks that what the plan says is true of the cluster: no host
gives more than it has, every job is either placed or told why it waits, and a reason that names a
preemption or a reservation names one the plan makes.
"""

from __future__ import annotations

import random

import pytest

from core.placement import HostView, NodeUse, Plan, Team, Usage, Waiting, plan
from core.quotas import Quota
from tests.scheduler.placement_reference import plan_reference
from trainer.spec import JobSpec

POOLS = ("default", "default", "default", "big")


def random_hosts(rng: random.Random, n: int) -> list[HostView]:
    hosts = []
    for i in range(n):
        gpus = rng.choice([0, 0, 1, 2, 4, 8])
        hosts.append(
            HostView(
                name=f"h{rng.choice(['', '-'])}{i}",  # '-' sorts before digits: names out of numeric order
                pool=rng.choice(POOLS),
                gpus=tuple(str(g) for g in range(gpus)),
                cpu_slots=rng.choice([0, 1, 2, 4, 8, 16]),
                storage_id=rng.choice(["nfs-a", "nfs-a", "nfs-b", f"own-{i}"]),
                draining=rng.random() < 0.1,
            )
        )
    return hosts


def random_usage(rng: random.Random, hosts: list[HostView], n: int, owners: list[int | None]) -> list[Usage]:
    """Running jobs, one or more nodes each, within what each host has (a few slots past it: usage as read)."""
    free_gpus = {h.name: list(h.gpus) for h in hosts}
    free_slots = {h.name: h.cpu_slots for h in hosts}
    usage = []
    for job_id in range(10_000, 10_000 + n):
        nodes = []
        for host in rng.sample(hosts, k=min(len(hosts), rng.choice([1, 1, 1, 2]))):
            want = rng.choice([1, 1, 2, 4])
            if free_gpus[host.name] and rng.random() < 0.7:
                taken = tuple(free_gpus[host.name][:want])
                free_gpus[host.name] = free_gpus[host.name][want:]
                nodes.append(NodeUse(host.name, taken, 0))
            else:
                free_slots[host.name] -= want
                nodes.append(NodeUse(host.name, (), want))
        usage.append(Usage(job_id, rng.randint(-3, 3), rng.random() < 0.5, tuple(nodes), rng.choice(owners)))
    return usage


def random_spec(rng: random.Random) -> JobSpec:
    fields: dict[str, object] = {
        "nproc": (nproc := rng.choice([1, 1, 2, 2, 3, 4, 8, 16])),
        "device": rng.choice(["auto", "auto", "cpu", "cuda"]),
        "accumulation_steps": rng.choice([1, 1, 2, 3, 4]),
        "sync": rng.choice(["ddp", "ddp", "manual"]),
        "preemptible": rng.random() < 0.3,
    }
    roll = rng.random()
    if roll < 0.2:
        fields["min_nproc"] = rng.randint(1, nproc)
    elif roll < 0.4:
        fields["nnodes"] = rng.choice([2, 2, 3])
    elif roll < 0.5:
        fields.update(sync="dataparallel", nproc=1, device=rng.choice(["auto", "cuda"]))
    return JobSpec.model_validate({"max_steps": 10, **fields})


def random_queue(rng: random.Random, n: int, owners: list[int | None]) -> list[Waiting]:
    jobs = []
    for job_id in range(1, n + 1):
        spec = random_spec(rng)
        priority = rng.choice([-2, 0, 0, 0, 1, 3, 5])
        pool = rng.choice([*POOLS, "nowhere"]) if rng.random() < 0.05 else rng.choice(POOLS)
        created = float(rng.randint(0, n // 2))  # ties: the job id decides
        jobs.append(Waiting(job_id, pool, priority, created, spec, rng.choice(owners)))
    rng.shuffle(jobs)
    return jobs


def random_team(rng: random.Random, owners: list[int | None]) -> Team | None:
    if rng.random() < 0.5:
        return None
    quotas = {
        o: Quota(f"user{o}", max_gpus=rng.choice([0, 1, 2, 4, 8]), max_slots=rng.choice([1, 2, 4, 16]))
        for o in owners
        if o is not None and rng.random() < 0.7
    }
    usage = {o: rng.random() * 10_000 for o in owners if o is not None and rng.random() < 0.8}
    return Team(quotas=quotas, usage=usage, half_life_s=rng.choice([60.0, 3600.0]))


def crowded(rng: random.Random, usage: list[Usage], waiting: list[Waiting]) -> tuple[list[Usage], list[Waiting]]:
    """A full cluster of preemptible low-priority jobs and a queue of few priorities above them: the same
    preemption asked again and again while placements change the hosts in between."""
    usage = [Usage(u.job_id, rng.randint(-3, 0), rng.random() < 0.9, u.nodes, u.owner) for u in usage]
    waiting = [Waiting(w.job_id, w.pool, rng.choice([1, 2]), w.created_at, w.spec, w.owner) for w in waiting]
    return usage, waiting


def random_case(
    seed: int, hosts: int, running: int, queued: int, crowd: bool = False
) -> tuple[list[Waiting], list[HostView], list[Usage], Team | None]:
    rng = random.Random(seed)
    owners: list[int | None] = [None, 1, 2, 3]
    cluster = random_hosts(rng, rng.randint(1, hosts))
    usage = random_usage(rng, cluster, rng.randint(0, running), owners)
    waiting = random_queue(rng, rng.randint(0, queued), owners)
    if crowd:
        usage, waiting = crowded(rng, usage, waiting)
    return waiting, cluster, usage, random_team(rng, owners)


def assert_true_of_the_cluster(p: Plan, waiting: list[Waiting], hosts: list[HostView], usage: list[Usage]) -> None:
    """What the plan says holds: capacity respected, every job placed or told why, reasons name real acts."""
    placed = {x.job_id for x in p.placements}
    assert placed.isdisjoint(p.pending)
    assert placed | set(p.pending) == {w.job_id for w in waiting}
    assert all(p.pending[j] for j in p.pending)  # never an empty reason
    by_name = {h.name: h for h in hosts}
    gpus_held = {h.name: set() for h in hosts}
    slots_held = {h.name: 0 for h in hosts}
    for use in usage:
        for node in use.nodes:
            gpus_held[node.host] |= set(node.gpus)
            slots_held[node.host] += node.slots
    for x in p.placements:
        assert len({n.host for n in x.nodes}) == len(x.nodes)
        for node in x.nodes:
            host = by_name[node.host]
            assert not host.draining  # (a host may be reserved after a job was placed on it)
            assert gpus_held[host.name].isdisjoint(node.gpus), "a GPU given twice"
            gpus_held[host.name] |= set(node.gpus)
            if node.slots:
                assert slots_held[host.name] + node.slots <= host.cpu_slots, "more slots than the host has"
            slots_held[host.name] += node.slots
    for job_id, reason in p.pending.items():
        if reason.startswith("waiting for preempted job(s)"):
            named = {int(x) for x in reason.split("job(s) ")[1].split(" to ")[0].split(", ")}
            assert named == {v for v, f in p.preempt.items() if f == job_id}
            assert job_id in p.reserved.values()
        if reason.startswith("waiting behind job "):
            blocker = int(reason.split()[3])
            assert blocker in p.reserved.values() and blocker in p.pending
    assert set(p.preempt.values()) <= set(p.pending)
    assert set(p.reserved.values()) <= set(p.pending)


CASES = (
    [(seed, 6, 8, 30, False) for seed in range(500)]
    + [(5_000 + seed, 8, 30, 40, True) for seed in range(300)]
    + [(10_000 + seed, 40, 60, 200, seed % 2 == 0) for seed in range(40)]
)


@pytest.mark.parametrize(("seed", "hosts", "running", "queued", "crowd"), CASES)
def test_the_indexed_pass_decides_what_the_full_pass_decides(seed: int, hosts: int, running: int, queued: int,
                                                              crowd: bool):  # fmt: skip
    waiting, cluster, usage, team = random_case(seed, hosts, running, queued, crowd)
    fast = plan(waiting, cluster, usage, team)
    full = plan_reference(waiting, cluster, usage, team)
    assert fast.placements == full.placements
    assert fast.pending == full.pending
    assert fast.preempt == full.preempt
    assert fast.reserved == full.reserved
    assert_true_of_the_cluster(fast, waiting, cluster, usage)


def test_the_random_cases_reach_every_rule():
    """The generator is worth its cases: across them every kind of decision happens."""
    seen: set[str] = set()
    for seed, hosts, running, queued, crowd in CASES[::4]:
        waiting, cluster, usage, team = random_case(seed, hosts, running, queued, crowd)
        p = plan(waiting, cluster, usage, team)
        seen |= {"elastic" for x in p.placements if x.elastic}
        seen |= {"gang" for x in p.placements if len(x.nodes) > 1}
        seen |= {"preempt"} if p.preempt else set()
        for reason in p.pending.values():
            for word, what in (
                ("waiting behind job", "reserved"),
                ("quota:", "quota"),
                ("share a runs dir", "gang reason"),
                ("most free:", "single reason"),
                ("is draining", "draining"),
                ("no host serves pool", "no pool"),
                ("lower nproc", "never fits"),
            ):
                if word in reason:
                    seen.add(what)
    assert seen >= {
        "elastic", "gang", "preempt", "reserved", "quota", "gang reason", "single reason", "draining", "no pool",
        "never fits",
    }  # fmt: skip
