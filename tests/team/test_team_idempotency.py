"""An Idempotency-Key is unique server-wide: a member who sends another's key (with the same spec) got that
member's job back as her own submit (200, `Idempotent-Replayed`), owned by the other. Now a 409 says to use a
new key; the owner's own retry still replays."""

from __future__ import annotations

from tests.support.jobs import fake_spec


def test_anothers_idempotency_key_is_refused_not_replayed(service, add_user) -> None:
    _, admin = service()
    _, alice = add_user(admin, "alice")
    _, bob = add_user(admin, "bob")
    spec, key = fake_spec("keyed"), {"Idempotency-Key": "team-key-1"}
    made = alice.http.post("/jobs", json=spec, headers=key)
    assert made.status_code == 201 and made.json()["owner"] == "alice", made.text
    again = alice.http.post("/jobs", json=spec, headers=key)
    assert again.status_code == 200 and again.json()["id"] == made.json()["id"], again.text
    taken = bob.http.post("/jobs", json=spec, headers=key)
    assert taken.status_code == 409 and "another user" in taken.json()["detail"], taken.text
