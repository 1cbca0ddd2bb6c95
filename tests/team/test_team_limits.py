"""Throttles per credential and per user, never per address alone; a member's priority ceiling; every sweep
change audited (issues 37 and 34 part 4), on a live API. No worker: jobs stay queued."""

from __future__ import annotations

import contextlib
import threading

import httpx

from tests.support.jobs import fake_spec, wait

WRONG = "w" * 43


def test_a_wrong_token_flood_never_locks_out_right_tokens_from_the_same_address(service, add_user) -> None:
    settings, admin = service(auth_failures_per_minute=5)
    base = str(admin.http.base_url)
    _, alice = add_user(admin, "alice")
    stop = threading.Event()
    flooded: list[int] = []

    def flood() -> None:
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {WRONG}"}, timeout=30) as http:
            while not stop.is_set():
                flooded.append(http.get("/jobs").status_code)

    thread = threading.Thread(target=flood)
    thread.start()
    try:
        wait(lambda: flooded.count(429) >= 20, timeout=60, what="the flood to be throttled")
        for _ in range(20):  # all from 127.0.0.1, as the flood
            assert alice.http.get("/jobs").status_code == 200
            assert admin.http.get("/users").status_code == 200
        assert alice.http.post("/jobs", json=fake_spec("during-the-flood")).status_code == 201
    finally:
        stop.set()
        thread.join()
    assert set(flooded) == {401, 429} and flooded.count(401) <= 5 + 1  # the flood itself stays throttled


def test_live_streams_are_capped_per_user_not_per_address(service, add_user) -> None:
    settings, admin = service(max_streams_per_client=2)
    _, alice = add_user(admin, "alice")
    _, bob = add_user(admin, "bob")
    job = alice.submit(fake_spec("watched"))
    url = f"/jobs/{job['id']}/stream"
    with contextlib.ExitStack() as streams:
        opened = [streams.enter_context(bob.http.stream("GET", url)) for _ in range(2)]
        assert [r.status_code for r in opened] == [200, 200]
        third = bob.http.get(url)
        assert third.status_code == 429 and "per user" in third.json()["detail"]
        with alice.http.stream("GET", url) as hers:  # same address, another user: her first stream opens
            assert hers.status_code == 200


def test_a_members_priority_is_capped_by_her_ceiling(service, add_user) -> None:
    settings, admin = service()
    _, alice = add_user(admin, "alice")
    r = alice.http.post("/jobs", json=fake_spec("loud", priority=1000))
    assert r.status_code == 403 and "priority ceiling of 100" in r.json()["detail"], r.text
    assert admin.http.patch("/users/alice", json={"max_priority": 5}).status_code == 200
    assert alice.http.get("/me").json()["quota"]["max_priority"] == 5
    r = alice.http.post("/jobs", json=fake_spec("six", priority=6))
    assert r.status_code == 403 and "alice's priority ceiling of 5" in r.json()["detail"], r.text
    job = alice.submit(fake_spec("five", priority=5))
    r = alice.http.patch(f"/jobs/{job['id']}", json={"priority": 50})
    assert r.status_code == 403 and "ceiling of 5" in r.json()["detail"]
    assert admin.http.patch(f"/jobs/{job['id']}", json={"priority": 900}).json()["priority"] == 900  # admins: none
    sweep = {"name": "loud", "job": fake_spec("loud", priority=7), "parameters": {"optimizer.lr": {"choice": [0.1]}}}
    r = alice.http.post("/sweeps", json=sweep)
    assert r.status_code == 403 and "ceiling of 5" in r.json()["detail"]
    assert "max_priority=5" in admin.http.get("/audit?action=user.quota").json()[0]["detail"]


def test_every_sweep_change_is_audited_with_its_actor(service, add_user) -> None:
    settings, admin = service()
    _, alice = add_user(admin, "alice")
    _, bob = add_user(admin, "bob")
    body = {"name": "aud", "job": fake_spec("aud"), "parameters": {"optimizer.lr": {"choice": [0.1, 0.2]}}}
    sweep = alice.http.post("/sweeps", json=body).json()
    sid = sweep["id"]
    assert alice.http.post(f"/sweeps/{sid}/pause").status_code == 200
    assert alice.http.post(f"/sweeps/{sid}/resume").status_code == 200
    assert bob.http.post(f"/sweeps/{sid}/cancel").status_code == 403  # not his
    assert bob.http.post(f"/sweeps/{sid}/extend-best", json={}).status_code == 403
    assert admin.http.post(f"/sweeps/{sid}/cancel").status_code == 202
    log = [(e["actor"], e["action"], e["target"]) for e in reversed(admin.http.get("/audit").json())]
    sweep_log = [e for e in log if e[2] == f"sweep {sid}"]
    assert sweep_log == [
        ("alice", "sweep.create", f"sweep {sid}"),
        ("alice", "sweep.pause", f"sweep {sid}"),
        ("alice", "sweep.resume", f"sweep {sid}"),
        ("admin", "sweep.cancel", f"sweep {sid}"),
    ]


def test_a_webhooks_error_text_is_shown_to_admins_only(service, add_user) -> None:
    """The server's webhooks are the admins': everyone sees a delivery's status code, only admins the
    receiver's error text (which may quote the receiver's own secrets)."""
    from sqlmodel import Session

    from core.db import get_engine
    from core.tables import NotificationDelivery, NotificationEvent

    settings, admin = service()
    _, alice = add_user(admin, "alice")
    _, vera = add_user(admin, "vera", role="viewer")
    job = alice.submit(fake_spec("hooked"))
    with Session(get_engine(settings.resolved_database_url)) as db:
        event = NotificationEvent(job_id=job["id"], kind="failed", status="failed")
        db.add(event)
        db.flush()
        failed = {"state": "failed", "attempts": 3, "last_status": 401, "last_error": "bad key sk-live-123"}
        db.add(NotificationDelivery(event_id=event.id or 0, job_id=job["id"], url="https://hooks.example/s", **failed))
        db.commit()
    for client in (alice, vera):
        [seen] = client.http.get(f"/jobs/{job['id']}/notifications").json()
        assert seen["last_status"] == 401 and seen["last_error"] is None
    [seen] = admin.http.get(f"/jobs/{job['id']}/notifications").json()
    assert seen["last_error"] == "bad key sk-live-123"


def _bundle() -> bytes:
    import io
    import tarfile

    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        data = b"print('mine')\n"
        info = tarfile.TarInfo("train.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return raw.getvalue()


def test_code_visibility_is_the_teams_or_the_owners_as_configured(service, add_user) -> None:
    """RANKZERO_CODE_VISIBILITY: 'team' (the default) lets every signed-in user read a bundle; 'owner' only its
    uploaders, the owners of jobs that run it, admins and worker hosts."""
    import hashlib

    for visibility, bob_reads in (("team", 200), ("owner", 403)):
        settings, admin = service(code_visibility=visibility)
        _, alice = add_user(admin, f"alice-{visibility}")
        _, bob = add_user(admin, f"bob-{visibility}")
        body = _bundle()
        sha = hashlib.sha256(body).hexdigest()
        assert alice.http.post("/code", content=body, headers={"Content-Type": "application/gzip"}).status_code in (
            200,
            201,
        )
        for path in (f"/code/{sha}", f"/code/{sha}/files", f"/code/{sha}/left-out"):
            assert alice.http.get(path).status_code == 200
            assert admin.http.get(path).status_code == 200
            r = bob.http.get(path)
            assert r.status_code == bob_reads, (visibility, path, r.text)
        if visibility == "owner":
            assert "RANKZERO_CODE_VISIBILITY=owner" in bob.http.get(f"/code/{sha}").text
            worker = admin.http.post("/workers", json={"host": "h1"}).json()["token"]
            fetched = httpx.get(f"{admin.http.base_url}code/{sha}", headers={"Authorization": f"Bearer {worker}"})
            assert fetched.status_code == 200  # a worker fetches what it runs
