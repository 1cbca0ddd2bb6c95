"""Quotas and fair share on a live API with real workers (fake trainer, CPU slots; issue 23)."""

from __future__ import annotations

from tests.support.jobs import fake_spec


def _short(name: str, steps: int = 15, **kw: object) -> dict:
    return fake_spec(name, nproc=1, max_steps=steps, behaviour={"step_s": 0.1}, **kw)


def test_a_job_past_its_owners_quota_waits_then_starts_when_hers_ends(service, workers, start_host, add_user) -> None:
    settings, admin = service()
    start_host(settings, "host-a", 2)
    _, alice = add_user(admin, "alice", max_cpu_slots=1, max_queued=5)
    _, bob = add_user(admin, "bob")

    # Refused at submit: could never fit her quota.
    r = alice.http.post("/jobs", json=fake_spec("too-big", nproc=2))
    assert r.status_code == 422 and "alice's quota is 1 CPU slots" in r.text, r.text
    # 'auto' on this CPU-only pool takes slots only: her GPU quota does not let it in to wait for ever (issue 37).
    r = alice.http.post("/jobs", json=fake_spec("too-big-auto", nproc=2, device="auto"))
    assert r.status_code == 422 and "alice's quota is 1 CPU slots:" in r.text, r.text

    first = alice.submit(_short("a-first", steps=40))
    alice.wait(first["id"], lambda j: j["status"] == "running", 60, "running")
    second = alice.submit(_short("a-second"))
    reason = alice.wait(second["id"], lambda j: j["pending_reason"], 30, "a reason")["pending_reason"]
    assert reason.startswith("quota: alice uses 1 of 1 CPU slots"), reason
    theirs = bob.submit(_short("b-free-slot"))  # the host has room: bob's job is not held back by alice's quota
    assert bob.wait_terminal(theirs["id"], 90)["status"] == "succeeded"
    assert alice.job(second["id"])["status"] == "queued"

    done_first = alice.wait_terminal(first["id"], 90)
    started = alice.wait_terminal(second["id"], 90)
    assert started["status"] == "succeeded" and started["started_at"] >= done_first["finished_at"]


def test_two_users_share_one_slot_by_fair_share_and_priority_still_goes_first(
    service, workers, start_host, add_user
) -> None:
    settings, admin = service()
    _, alice = add_user(admin, "alice")
    _, bob = add_user(admin, "bob")
    a_jobs = [alice.submit(_short(f"a{i}", steps=3)) for i in range(3)]
    b_jobs = [bob.submit(_short(f"b{i}", steps=3)) for i in range(2)]  # later than all of alice's
    urgent = alice.submit(_short("a-urgent", steps=3, priority=5))
    start_host(settings, "host-a", 1)  # one slot: the jobs run one at a time, in the scheduler's order

    # FIFO would run a0, a1, a2 before bob's; fair share lets bob's in as soon as alice has used more.
    admin.wait(b_jobs[1]["id"], lambda j: j["started_at"] is not None, 300, "b1 to start")
    jobs = {j["name"]: admin.job(j["id"]) for j in [*a_jobs, *b_jobs, urgent]}
    started = sorted((j for j in jobs.values() if j["started_at"]), key=lambda j: j["started_at"])
    order = [j["name"] for j in started]
    assert order[0] == "a-urgent", order  # priority before fair share
    assert order[1] == "b0" and "a1" not in order, order  # bob's two before alice's second
    for job in jobs.values():
        admin.http.post(f"/jobs/{job['id']}/cancel")
