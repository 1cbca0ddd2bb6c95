"""Issue 37 part 5, the page: a member adds a webhook of her own on /webhooks, sees its secret once, sends it
a test and reads the receiver's status code, reads its delivery log (a job of hers delivered), and removes
it after a confirm. A viewer, who may add none, is not offered the page in the nav nor its form."""

from __future__ import annotations

import json
import time
import uuid

import httpx

from core import notify
from core.tables import JobStatus
from tests.ops.receiver import Receiver
from tests.support.deadlines import deadline_in
from tests.support.rows import insert_job


def _sign_in(new_page, web_service, token: str):
    page = new_page(signed_in=False)
    page.goto(f"{web_service.base}/login")
    page.fill("#token", token)
    page.click("button[type=submit]")
    page.wait_for_url(f"{web_service.base}/")
    return page


def _user(web_service, role: str) -> dict:
    with web_service.client() as admin:
        made = admin.post("/api/users", json={"name": f"{role[:2]}{uuid.uuid4().hex[:6]}", "role": role})
        assert made.status_code == 201, made.text
        return made.json()


def _delivered(web_service, token: str, hook_id: int) -> list[dict]:
    """The hook's deliveries once one is delivered (the service's notification sender runs on its own)."""
    deadline = deadline_in(60)
    with httpx.Client(base_url=web_service.base, headers={"Authorization": f"Bearer {token}"}) as me:
        while True:
            rows = me.get(f"/api/webhooks/{hook_id}/deliveries").json()
            if any(r["state"] == "delivered" for r in rows):
                return rows
            assert time.monotonic() < deadline, f"no delivery to webhook {hook_id}: {rows}"
            time.sleep(0.2)


def test_a_member_adds_tests_reads_and_removes_her_webhook(new_page, web_service, db) -> None:
    member = _user(web_service, "member")
    token, user_id = member["token"]["token"], member["user"]["id"]
    receiver = Receiver()
    try:
        page = _sign_in(new_page, web_service, token)
        page.get_by_role("link", name="Webhooks").click()
        page.wait_for_url(f"{web_service.base}/webhooks")
        page.wait_for_function("() => !document.querySelector('#add-webhook').hidden")
        page.fill("#new-webhook-url", receiver.url)
        page.click("#add-webhook button[type=submit]")
        page.wait_for_selector("#new-webhook-secret:not([hidden])")
        secret = page.locator("#new-webhook-secret-value").inner_text().strip()
        assert len(secret) >= 32
        row = page.locator("#webhooks-body tr[data-webhook]")
        page.wait_for_function("() => document.querySelectorAll('#webhooks-body tr[data-webhook]').length === 1")
        hook_id = int(row.get_attribute("data-webhook") or 0)
        assert receiver.url in row.inner_text()

        row.get_by_role("button", name=f"Send webhook {hook_id} a test event").click()
        page.wait_for_function(
            "() => document.querySelector('#webhooks-body .webhook-test').textContent.includes('HTTP 200')"
        )
        assert len(receiver.calls) == 1
        headers, raw, _ = receiver.calls[0]
        assert json.loads(raw)["event"] == "webhook.test"
        assert notify.signature_ok(secret, raw, headers["x-rankzero-signature"])  # the secret the page showed

        job = insert_job(db, "hers", JobStatus.succeeded, owner_id=user_id)
        notify.record(db, int(job.id or 0), JobStatus.succeeded, 0, "finished")
        db.commit()
        _delivered(web_service, token, hook_id)
        row.get_by_role("button", name=f"Deliveries of webhook {hook_id}").click()
        page.wait_for_function("() => document.querySelectorAll('#deliveries-body tr').length === 1")
        delivery = page.locator("#deliveries-body tr").inner_text()
        assert "job.succeeded" in delivery and "HTTP 200" in delivery and "delivered" in delivery

        page.reload()  # the secret was shown once
        page.wait_for_function("() => document.querySelectorAll('#webhooks-body tr[data-webhook]').length === 1")
        assert page.locator("#new-webhook-secret").is_hidden()
        assert secret not in page.content()

        page.on("dialog", lambda dialog: dialog.accept())
        page.get_by_role("button", name=f"Remove webhook {hook_id}").click()
        page.wait_for_function("() => !document.querySelector('#webhooks-empty').hidden")
        with httpx.Client(base_url=web_service.base, headers={"Authorization": f"Bearer {token}"}) as me:
            assert me.get("/api/webhooks").json() == []
    finally:
        receiver.close()


def test_a_viewer_is_offered_no_webhooks(new_page, web_service) -> None:
    page = _sign_in(new_page, web_service, _user(web_service, "viewer")["token"]["token"])
    assert page.get_by_role("link", name="Webhooks").count() == 0
    page.goto(f"{web_service.base}/webhooks")
    page.wait_for_function("() => !document.querySelector('#webhooks-empty').hidden")  # loaded: none of hers
    assert page.locator("#add-webhook").is_hidden()
