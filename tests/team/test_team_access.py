"""Users, tokens, roles and ownership on a live API (issue 23): two members and a viewer with their own
tokens; each forbidden action is a 403 naming the role, each allowed one is done; ownership is shown and
filtered; revoking a token ends its sessions; the audit log names every actor. No worker: jobs stay queued."""

from __future__ import annotations

from typing import Any

import httpx

from tests.support.jobs import fake_spec


def _sign_in(base: str, token: str) -> httpx.Client:
    browser = httpx.Client(base_url=base, follow_redirects=False, timeout=30)
    r = browser.post("/login", data={"token": token, "next": "/"})
    assert r.status_code == 303, r.text
    return browser


def _signed_in(browser: httpx.Client) -> bool:
    return browser.get("/api/me").status_code == 200


def test_members_viewers_and_admins_each_do_what_their_role_allows(service, add_user) -> None:
    settings, admin = service()
    base = str(admin.http.base_url).removesuffix("/api/").removesuffix("/api")
    _, alice = add_user(admin, "alice")
    _, bob = add_user(admin, "bob")
    _, vera = add_user(admin, "vera", role="viewer")
    assert alice.http.get("/me").json()["role"] == "member"

    a1 = alice.submit(fake_spec("a1"))
    a2 = alice.submit(fake_spec("a2"))
    b1 = bob.submit(fake_spec("b1"))
    assert a1["owner"] == "alice" and b1["owner"] == "bob"

    # Everyone reads everything; lists filter by owner.
    assert vera.job(a1["id"])["owner"] == "alice"
    names = lambda client, q: {j["name"] for j in client.http.get(f"/jobs?{q}").json()["items"]}  # noqa: E731
    assert names(alice, "mine=true") == {"a1", "a2"}
    assert names(vera, "owner=bob") == {"b1"}

    # Forbidden: each a 403 that names the role needed.
    refusals: list[tuple[Any, str, str, dict | None]] = [
        (bob, "post", f"/jobs/{a1['id']}/cancel", None),
        (bob, "patch", f"/jobs/{a1['id']}", {"priority": 5}),
        (bob, "post", f"/jobs/{a1['id']}/archive", None),
        (vera, "post", "/jobs", fake_spec("v1")),
        (vera, "post", f"/jobs/{a1['id']}/cancel", None),
        (alice, "post", "/users", {"name": "mallory"}),
        (alice, "get", "/audit", None),
        (alice, "post", "/hosts/any-host/drain", None),
        (alice, "get", "/users/bob/tokens", None),
    ]
    for client, method, path, body in refusals:
        r = client.http.request(method, path, json=body)
        assert r.status_code == 403, (method, path, r.text)
        assert "needs role" in r.json()["detail"], r.text

    # Allowed: her own jobs to the member, anyone's to the admin.
    assert alice.http.patch(f"/jobs/{a1['id']}", json={"priority": 5}).json()["priority"] == 5
    assert alice.http.post(f"/jobs/{a1['id']}/cancel").json()["status"] == "cancelled"
    assert admin.http.post(f"/jobs/{b1['id']}/cancel").json()["status"] == "cancelled"
    tagged = alice.http.patch(f"/jobs/{a1['id']}/annotations", json={"tags": ["baseline"], "note": "lr 3e-4"})
    assert tagged.json()["tags"] == ["baseline"] and tagged.json()["note"] == "lr 3e-4"
    assert names(vera, "tag=baseline") == {"a1"}
    assert alice.http.delete(f"/jobs/{a2['id']}").status_code == 409  # still queued: refused
    assert alice.http.post(f"/jobs/{a1['id']}/archive").json()["archived"] is True
    assert "a1" not in names(alice, "mine=true") and names(alice, "archived=true") == {"a1"}
    assert alice.http.delete(f"/jobs/{a1['id']}").status_code == 204
    assert alice.http.get(f"/jobs/{a1['id']}").status_code == 404

    # The old single token is the first admin's.
    assert admin.http.get("/me").json() | {"name": "admin", "role": "admin"} == admin.http.get("/me").json()

    # Sessions: signing out ends that session only; revoking the token ends all of its sessions.
    tokens = alice.http.get("/users/alice/tokens").json()
    alice_token = str(alice.http.headers["authorization"]).removeprefix("Bearer ")
    first, second = _sign_in(base, alice_token), _sign_in(base, alice_token)
    admin_browser = _sign_in(base, settings.token())
    assert _signed_in(first) and _signed_in(second)
    # The Team page (users, tokens, audit) is the admins': linked for them, refused to others with the role.
    assert 'href="/admin"' in admin_browser.get("/").text and 'href="/admin"' not in first.get("/").text
    assert admin_browser.get("/admin").status_code == 200
    assert "needs role admin" in first.get("/admin").text
    r = first.post("/logout", data={"csrf": first.cookies["rankzero_csrf"]})
    assert r.status_code == 303
    assert not _signed_in(first) and _signed_in(second) and _signed_in(admin_browser)
    assert admin.http.post(f"/tokens/{tokens[0]['id']}/revoke").status_code == 200
    assert not _signed_in(second) and _signed_in(admin_browser)
    assert alice.http.get("/me").status_code == 401

    # The audit log names each action and its actor.
    events = admin.http.get("/audit?limit=100").json()
    seen = {(e["actor"], e["action"]) for e in events}
    for expected in [
        ("admin", "user.add"), ("alice", "job.submit"), ("bob", "job.submit"), ("alice", "job.priority"),
        ("alice", "job.cancel"), ("admin", "job.cancel"), ("alice", "job.edit"), ("alice", "job.archive"),
        ("alice", "job.delete"), ("admin", "token.revoke"),
    ]:  # fmt: skip
        assert expected in seen, (expected, seen)
