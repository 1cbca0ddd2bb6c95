"""A member reads every job but changes only her own (docs/security.md "Roles"): the job page shows who is
signed in and offers her Archive and "Resume from here" on her own job only. Before, another member's job
offered them too, and each answered 403."""

from __future__ import annotations

import uuid

from core.tables import Checkpoint
from tests.support.rows import seed_job


def _sign_in(new_page, web_service, token: str):
    page = new_page(signed_in=False)
    page.goto(f"{web_service.base}/login")
    page.fill("#token", token)
    page.click("button[type=submit]")
    page.wait_for_url(f"{web_service.base}/")
    return page


def _job_page(page, web_service, job_id: int | None):
    page.goto(f"{web_service.base}/jobs/{job_id}")
    page.wait_for_selector("#checkpoints-body tr")
    page.wait_for_function("() => document.querySelector('#job-facts').textContent.includes('submitted by')")
    return page


def test_a_member_is_offered_changes_to_her_own_jobs_only(new_page, web_service, db) -> None:
    name = f"uma{uuid.uuid4().hex[:6]}"
    with web_service.client() as admin:
        made = admin.post("/api/users", json={"name": name, "role": "member"})
        assert made.status_code == 201, made.text
        uma_id, uma_token = made.json()["user"]["id"], made.json()["token"]["token"]
    theirs = seed_job(db, "admins-job", runs_dir=web_service.runs_dir, total_steps=100)
    mine = seed_job(db, "umas-job", runs_dir=web_service.runs_dir, total_steps=100)
    theirs.owner_id, mine.owner_id = 1, uma_id
    for job in (theirs, mine):
        db.add(job)
        db.add(Checkpoint(job_id=job.id, step=100, path="checkpoints/step_00000100.pt", bytes=3, sha256="a" * 64))
    db.commit()

    page = _sign_in(new_page, web_service, uma_token)
    assert page.locator(".topbar .whoami").inner_text() == f"{name} · member"
    _job_page(page, web_service, theirs.id)
    assert page.locator("#archive-job").is_hidden()
    assert page.get_by_role("link", name="Resume from checkpoint at step 100").count() == 0
    assert page.locator("#clone-job").is_visible()  # a copy is her own job
    _job_page(page, web_service, mine.id)
    assert page.locator("#archive-job").is_visible()
    assert page.get_by_role("link", name="Resume from checkpoint at step 100").is_visible()


def test_a_viewer_is_offered_no_new_job(new_page, web_service) -> None:
    """A viewer reads only: "New job" led her to a form whose submit answered 403."""
    name = f"vi{uuid.uuid4().hex[:6]}"
    with web_service.client() as admin:
        made = admin.post("/api/users", json={"name": name, "role": "viewer"})
        assert made.status_code == 201, made.text
    page = _sign_in(new_page, web_service, made.json()["token"]["token"])
    assert page.locator(".topbar .whoami").inner_text() == f"{name} · viewer"
    assert page.get_by_role("link", name="New job").count() == 0


def test_a_member_is_offered_a_sweeps_actions_on_her_own_sweep_only_and_no_drain(new_page, web_service, db) -> None:
    """Issue 37: the sweep page showed "Train the best longer" to everyone and the Hosts page "Drain…" to
    members; both answered 403. The pages read the one table (core/permissions.py) through `data-may`."""
    from core.sweeps import store
    from core.sweeps.space import SweepSpec
    from tests.support.jobs import fake_spec

    name = f"sam{uuid.uuid4().hex[:6]}"
    with web_service.client() as admin:
        made = admin.post("/api/users", json={"name": name, "role": "member"})
        assert made.status_code == 201, made.text
    spec = SweepSpec.model_validate(
        {"name": "btn", "job": fake_spec("btn"), "parameters": {"optimizer.lr": {"choice": [0.1]}}}
    )
    ids = {}
    for who, owner in (("admin", 1), ("mine", made.json()["user"]["id"])):
        row = store.create(db, spec, "default", owner_id=owner)
        store.set_status(db, int(row.id or 0), "paused", ("running",))  # no trials: nothing runs
        db.commit()
        ids[who] = row.id
    page = _sign_in(new_page, web_service, made.json()["token"]["token"])
    for who, offered in (("admin", False), ("mine", True)):
        page.goto(f"{web_service.base}/sweeps/{ids[who]}")
        page.wait_for_function("() => !document.querySelector('#sweep-actions').hidden")  # rendered
        assert page.locator("#sweep-extend").is_visible() is offered, who
        assert page.locator("#sweep-resume").is_visible() is offered, who
    page.goto(f"{web_service.base}/hosts")
    page.wait_for_selector("#hosts-body tr")
    assert page.locator("button[data-action=drain], button[data-action=undrain]").count() == 0


def test_the_team_page_gives_a_worker_host_its_credential_and_revokes_it(new_page, web_service) -> None:
    """Issue 34 part 4 on the Team page: an admin adds a host's own credential (shown once), sees its last
    use, and revokes it; the revoked credential is refused at once."""
    import httpx

    host = f"h{uuid.uuid4().hex[:6]}"
    page = new_page()
    page.goto(f"{web_service.base}/admin")
    page.fill("#new-worker-host", host)
    page.click("#add-worker button[type=submit]")
    page.wait_for_selector("#new-worker-token:not([hidden])")
    token = page.locator("#new-worker-token-value").inner_text().strip()
    me = httpx.get(f"{web_service.base}/api/workers/me", headers={"Authorization": f"Bearer {token}"})
    assert me.json() == {"host": host}
    row = page.locator(f"#workers-body tr[data-worker-host='{host}']")
    assert row.is_visible()
    page.on("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name=f"Revoke the credential of host {host}").click()
    page.wait_for_function(
        "h => document.querySelector(`#workers-body tr[data-worker-host='${h}']`).textContent.includes('revoked')",
        arg=host,
    )
    assert (
        httpx.get(f"{web_service.base}/api/workers/me", headers={"Authorization": f"Bearer {token}"}).status_code == 401
    )
