"""The team's pure rules (issue 23): fair-share arithmetic and order, quotas in placement and at submit."""

from __future__ import annotations

import math

import pytest

from core import fair_share, quotas
from core.placement import HostView, NodeUse, Team, Usage, Waiting, plan
from core.placement_types import kinds_in_pool
from core.quotas import Quota
from trainer.spec import JobSpec

HOUR = 3600.0


def spec(**fields: object) -> JobSpec:
    return JobSpec(max_steps=10, **fields)


def cpu(name: str, slots: int) -> HostView:
    return HostView(name=name, pool="default", gpus=(), cpu_slots=slots, storage_id="shared")


def gpu(name: str, n: int) -> HostView:
    return HostView(name=name, pool="default", gpus=tuple(str(i) for i in range(n)), cpu_slots=8, storage_id="shared")


def waiting(job_id: int, owner: int, *, priority: int = 0, created: float | None = None, **fields: object) -> Waiting:
    created = float(job_id) if created is None else created
    return Waiting(job_id, "default", priority, created, spec(priority=priority, **fields), owner=owner)


def order(p) -> list[int]:
    return [x.job_id for x in p.placements]


# --- fair_share arithmetic --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("account", "now", "rate", "usage"),
    [
        (fair_share.Account(), 100.0, 2.0, 0.0),  # new: nothing charged yet, the rate starts now
        (fair_share.Account(100.0, 1000.0, 0.0), 1000.0 + HOUR, 0.0, 50.0),  # one half-life: halved
        (fair_share.Account(100.0, 1000.0, 0.0), 1000.0 + 2 * HOUR, 0.0, 25.0),
        (fair_share.Account(0.0, 1000.0, 1.0), 1000.0 + HOUR, 1.0, HOUR / math.log(2) / 2),  # ∫ of 1 unit
        (fair_share.Account(10.0, 1000.0, 0.0), 900.0, 0.0, 10.0),  # a clock step back never adds usage
    ],
)
def test_advance_decays_and_charges(account, now, rate, usage):
    after = fair_share.advance(account, now, rate, HOUR)
    assert after.usage == pytest.approx(usage)
    assert after.rate == rate


def test_a_steady_rate_tends_to_rate_times_mean_life():
    account = fair_share.Account(0.0, 1.0, 4.0)
    for step in range(1, 200):
        account = fair_share.advance(account, 1.0 + step * 600, 4.0, HOUR)
    assert account.usage == pytest.approx(4.0 * fair_share.mean_life(HOUR), rel=1e-3)


# --- fair share in placement ------------------------------------------------------------------------------


def test_two_users_interleave_within_a_pass_at_equal_priority():
    a_jobs = [waiting(i, owner=1, nproc=1) for i in range(1, 11)]  # A's 10, submitted first
    b_jobs = [waiting(100 + i, owner=2, nproc=1, created=50.0 + i) for i in range(2)]  # B's 2, later
    p = plan(a_jobs + b_jobs, [cpu("h", 4)], [], Team(half_life_s=HOUR))
    assert order(p) == [1, 100, 2, 101]


def test_without_a_team_the_order_is_todays():
    a_jobs = [waiting(i, owner=1, nproc=1) for i in range(1, 11)]
    b_jobs = [waiting(100 + i, owner=2, nproc=1, created=50.0 + i) for i in range(2)]
    assert order(plan(a_jobs + b_jobs, [cpu("h", 4)], [])) == [1, 2, 3, 4]


def test_the_owner_with_less_recent_usage_goes_first_on_one_slot():
    jobs = [waiting(1, owner=1, nproc=1), waiting(2, owner=2, nproc=1, created=99.0)]
    p = plan(jobs, [cpu("h", 1)], [], Team(usage={1: 500.0, 2: 10.0}, half_life_s=HOUR))
    assert order(p) == [2]
    assert 1 in p.pending


def test_what_an_owner_holds_now_counts_against_her():
    jobs = [waiting(1, owner=1, nproc=1), waiting(2, owner=2, nproc=1, created=99.0)]
    held = [Usage(50, 0, False, (NodeUse("h", (), 1),), owner=1)]
    p = plan(jobs, [cpu("h", 2)], held, Team(half_life_s=HOUR))
    assert order(p) == [2]


def test_higher_priority_still_goes_first_whatever_the_usage():
    jobs = [waiting(1, owner=1, nproc=1, priority=5), waiting(2, owner=2, nproc=1)]
    p = plan(jobs, [cpu("h", 1)], [], Team(usage={1: 1e9, 2: 0.0}, half_life_s=HOUR))
    assert order(p) == [1]


def test_preemption_keeps_its_rule_under_fair_share():
    victim = Usage(7, 0, True, (NodeUse("h", (), 1),), owner=2)
    p = plan([waiting(1, owner=1, nproc=1, priority=5)], [cpu("h", 1)], [victim], Team(usage={1: 1e9}))
    assert p.preempt == {7: 1}


# --- quotas -----------------------------------------------------------------------------------------------


def test_a_job_past_its_owners_gpu_quota_waits_with_the_quota_as_reason():
    held = [Usage(10 + i, 0, False, (NodeUse("g", (str(i),), 0),), owner=1) for i in range(4)]
    team = Team(quotas={1: Quota("alice", max_gpus=4)})
    p = plan([waiting(1, owner=1, nproc=1, device="cuda")], [gpu("g", 8)], held, team)
    assert p.placements == []
    assert p.pending[1] == "quota: alice uses 4 of 4 GPUs; this job needs 1 more"
    assert p.reserved == {}  # a job over quota reserves nothing


def test_the_quota_counts_jobs_placed_earlier_in_the_same_pass():
    team = Team(quotas={1: Quota("alice", max_slots=2)})
    jobs = [waiting(i, owner=1, nproc=1, device="cpu") for i in (1, 2, 3)] + [waiting(4, owner=2, nproc=1)]
    p = plan(jobs, [cpu("h", 8)], [], team)
    assert sorted(order(p)) == [1, 2, 4]
    assert p.pending[3].startswith("quota: alice uses 2 of 2 CPU slots")


def test_an_auto_job_may_use_the_kind_with_room_left():
    held = [Usage(10, 0, False, (NodeUse("g", ("0",), 0),), owner=1)]
    team = Team(quotas={1: Quota("alice", max_gpus=1, max_slots=4)})
    p = plan([waiting(1, owner=1, nproc=1)], [gpu("g", 2), cpu("c", 2)], held, team)
    assert p.placements[0].nodes[0].host == "c"


@pytest.mark.parametrize(
    ("fields", "quota", "refused"),
    [
        ({"nproc": 2, "device": "cpu"}, Quota("bob", max_slots=1), "bob's quota is 1 CPU slots"),
        ({"nproc": 2, "device": "cpu", "min_nproc": 1}, Quota("bob", max_slots=1), None),  # elastic fits
        ({"nproc": 4, "device": "cuda"}, Quota("bob", max_gpus=2), "bob's quota is 2 GPUs"),
        ({"nproc": 4}, Quota("bob", max_gpus=2, max_slots=8), None),  # auto: slots would do
        ({"nproc": 4}, Quota("bob", max_gpus=2, max_slots=2), "2 GPUs and 2 CPU slots"),
        ({"nproc": 1}, Quota("admin"), None),
    ],
)
def test_never_within_quota_at_submit(fields, quota, refused):
    why = quotas.never_within(spec(**fields), quota)
    assert (why is None) if refused is None else (refused in (why or ""))


def test_queued_quota():
    assert quotas.over_queued(2, Quota("bob", max_queued=3)) is None
    assert "3 of 3 jobs queued" in (quotas.over_queued(3, Quota("bob", max_queued=3)) or "")


def test_admins_have_no_quota_and_members_get_defaults_unless_set():
    assert quotas.for_user("root", "admin", (1, 1, 1), (8, 64, 100)) == Quota("root")
    assert quotas.for_user("bob", "member", (None, 2, None), (8, 64, 100)) == Quota("bob", 8, 2, 100)


# --- the GPU quota counts only jobs that will run on GPUs (issue 37) --------------------------------------

# A member allowed no GPUs, or whose GPUs are all held elsewhere: neither may hold up a job that runs on slots.
NO_GPUS = Quota("alice", max_gpus=0, max_slots=8)
GPUS_HELD = Quota("alice", max_gpus=1, max_slots=8)


@pytest.mark.parametrize(
    ("fields", "hosts", "kinds"),
    [({}, [cpu("c", 8)], {"slot"}),  # auto on a CPU-only pool: slots only
     ({}, [gpu("g", 2)], {"gpu"}), ({}, [gpu("g", 2), cpu("c", 8)], {"gpu", "slot"}),
     ({}, [], {"gpu", "slot"}),  # no host yet: what it may take anywhere
     ({"device": "cpu"}, [gpu("g", 2)], {"slot"}), ({"device": "cuda"}, [gpu("g", 2), cpu("c", 8)], {"gpu"}),
     ({"device": "cuda"}, [cpu("c", 8)], {"gpu"}),  # no host can run it: never_fits says so, not the quota
     ({"sync": "dataparallel"}, [gpu("g", 2), cpu("c", 8)], {"gpu"})],
)  # fmt: skip
def test_the_kinds_a_job_takes_in_its_pool(fields: dict, hosts: list[HostView], kinds: set[str]) -> None:
    assert kinds_in_pool(spec(**fields), hosts) == kinds


@pytest.mark.parametrize(
    ("fields", "quota", "gpus", "slots", "refused"),
    [({"nproc": 2}, NO_GPUS, False, True, None),  # auto on a CPU-only pool: the GPU quota is not counted
     ({"nproc": 2}, Quota("alice", max_gpus=8, max_slots=1), False, True, "alice's quota is 1 CPU slots"),
     ({"nproc": 2}, Quota("alice", max_gpus=1, max_slots=8), True, False, "alice's quota is 1 GPUs"),
     ({"nproc": 2}, Quota("alice", max_gpus=8, max_slots=1), True, True, None),
     ({"nproc": 2, "device": "cpu"}, NO_GPUS, True, True, None)],
)  # fmt: skip
def test_never_within_counts_only_the_kinds_its_pool_offers(fields, quota, gpus, slots, refused) -> None:
    why = quotas.never_within(spec(**fields), quota, gpus, slots)
    assert (why is None) if refused is None else (refused in (why or "")), why


@pytest.mark.parametrize(
    ("quota", "held_gpus"),
    [(NO_GPUS, 0), (GPUS_HELD, 1), (Quota("alice", max_gpus=2, max_slots=8), 2)],
)
def test_an_auto_job_on_a_cpu_only_pool_is_placed_whatever_her_gpu_quota(quota: Quota, held_gpus: int) -> None:
    """'needs 2 more' of her GPU quota held such a job for ever; her GPUs held in another pool count only there."""
    held = [
        Usage(10 + i, 0, False, (NodeUse("g-other", (str(i),), 0),), owner=1) for i in range(held_gpus)
    ]  # fmt: skip
    p = plan([waiting(1, owner=1, nproc=2)], [cpu("c", 8)], held, Team(quotas={1: quota}))
    assert [(n.host, n.gpus, n.slots) for n in p.placements[0].nodes] == [("c", (), 2)], p.pending
