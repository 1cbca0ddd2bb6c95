"""A user's own webhooks (issue 37 part 5): a member's receiver gets her own jobs' and sweeps' events only,
signed with her hook's secret; a loopback (or private, link-local, metadata) URL is refused for her unless the
server allows such addresses; a delivery's error text is her own and the admins' to read, its status everyone's.

The API runs in-process and the worker's sender is driven pass by pass (worker/notify_sender.py run_pass),
so every delivery the test waits on is one it made happen."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from api.app import create_app
from core import notify, webhooks
from core.db import get_engine
from core.settings import Settings
from core.sweeps import store
from core.sweeps.space import SweepSpec
from core.tables import JobStatus
from tests.ops.receiver import Receiver
from tests.support import deadlines
from tests.support.commands import RANKZERO
from tests.support.jobs import fake_spec
from tests.support.rows import insert_job
from tests.support.settings import API_TOKEN
from worker import notify_sender

SWEEP = {"name": "hers", "job": fake_spec("trial"), "trials": 2, "parallel": 1,
         "parameters": {"optimizer.lr": {"log_uniform": [0.001, 0.1]}}}  # fmt: skip


@dataclass
class Team:
    settings: Settings
    app: object
    clients: dict[str, TestClient]
    ids: dict[str, int]

    def job_event(self, owner: str, status: JobStatus = JobStatus.succeeded) -> int:
        """A job of `owner` that has just moved to `status` (its outbox row written as a transition writes it)."""
        with Session(get_engine(self.settings.resolved_database_url)) as db:
            job = insert_job(db, f"{owner}-job", status, owner_id=self.ids[owner])
            notify.record(db, int(job.id or 0), status, 0, "finished" if status is JobStatus.succeeded else None)
            db.commit()
            return int(job.id or 0)

    def sweep_end(self, owner: str) -> int:
        with Session(get_engine(self.settings.resolved_database_url)) as db:
            row = store.create(db, SweepSpec.model_validate(SWEEP), "default", owner_id=self.ids[owner])
            sweep_id = int(row.id or 0)
            assert store.set_status(db, sweep_id, "finished", store.ACTIVE, note="2 trials done")
            db.commit()
            return sweep_id

    def deliver(self) -> None:
        """Sender passes until nothing is left to send now (every try answered at once)."""
        engine = get_engine(self.settings.resolved_database_url)
        with httpx.Client(timeout=deadlines.seconds(10)) as client:
            for _ in range(5):
                if notify_sender.run_pass(engine, self.settings, client) == 0:
                    return
        raise AssertionError("the sender still had work after 5 passes")


@pytest.fixture
def team(api_settings: Callable[..., Settings]) -> Iterator[Callable[..., Team]]:
    made: list[TestClient] = []

    def make(**overrides: object) -> Team:
        settings = api_settings(webhook_backoff_s=3600.0, **overrides)  # a failed try stays failed for the test
        app = create_app(settings)
        admin = TestClient(app, headers={"Authorization": f"Bearer {API_TOKEN}"})
        admin.__enter__()  # the lifespan: migrations
        made.append(admin)
        clients, ids = {"admin": admin}, {"admin": 1}
        for name, role in (("alice", "member"), ("bob", "member"), ("vera", "viewer")):
            r = admin.post("/api/users", json={"name": name, "role": role})
            assert r.status_code == 201, r.text
            ids[name] = r.json()["user"]["id"]
            clients[name] = TestClient(app, headers={"Authorization": f"Bearer {r.json()['token']['token']}"})
        return Team(settings, app, clients, ids)

    yield make
    for client in made:
        client.__exit__(None, None, None)


@pytest.fixture
def receivers() -> Iterator[Callable[..., Receiver]]:
    started: list[Receiver] = []

    def start(statuses: list[int] | None = None) -> Receiver:
        started.append(Receiver(statuses))
        return started[-1]

    yield start
    for r in started:
        r.close()


def _add(client: TestClient, url: str) -> dict:
    r = client.post("/api/webhooks", json={"url": url})
    assert r.status_code == 201, r.text
    return r.json()


def test_a_members_receiver_gets_her_own_jobs_and_sweeps_events_only_signed(team, receivers) -> None:
    t = team(webhook_allow_private=True)  # the receivers listen on loopback
    hers, his = receivers(), receivers()
    alice_hook, bob_hook = _add(t.clients["alice"], hers.url), _add(t.clients["bob"], his.url)
    assert alice_hook["secret"] != bob_hook["secret"] and alice_hook["owner"] == "alice"
    assert "secret" not in t.clients["alice"].get("/api/webhooks").json()[0]  # shown once, when added

    alice_job, bob_job = t.job_event("alice"), t.job_event("bob", JobStatus.failed)
    alice_sweep = t.sweep_end("alice")
    t.deliver()

    got = []
    for headers, raw, _ in hers.calls:
        assert notify.signature_ok(alice_hook["secret"], raw, headers["x-rankzero-signature"]), "not signed with hers"
        assert not notify.signature_ok(bob_hook["secret"], raw, headers["x-rankzero-signature"])
        body = json.loads(raw)
        assert headers["x-rankzero-event"] == body["event"]
        got.append((body["event"], (body.get("job") or body.get("sweep"))["id"]))
    assert sorted(got) == [("job.succeeded", alice_job), ("sweep.finished", alice_sweep)]
    assert [json.loads(raw)["job"]["id"] for _, raw, _ in his.calls] == [bob_job]  # his own, not hers
    sweep_body = next(json.loads(raw) for _, raw, _ in hers.calls if b"sweep.finished" in raw)
    assert sweep_body["sweep"]["name"] == "hers" and sweep_body["detail"] == "2 trials done"


def test_the_server_webhooks_still_hear_every_job_alongside_hers(team, receivers) -> None:
    server, hers = receivers(), receivers()
    t = team(webhook_allow_private=True, webhook_urls=server.url, webhook_secret="server-secret-0123456789abcdef")
    _add(t.clients["alice"], hers.url)
    ids = {t.job_event("alice"), t.job_event("bob")}
    t.deliver()
    assert {json.loads(raw)["job"]["id"] for _, raw, _ in server.calls} == ids
    assert all(notify.signature_ok("server-secret-0123456789abcdef", raw, h["x-rankzero-signature"])
               for h, raw, _ in server.calls)  # fmt: skip
    assert len(hers.calls) == 1


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:{port}/hook", "http://localhost:{port}/hook", "http://[::1]:{port}/", "http://169.254.169.254/latest",
     "http://10.1.2.3/", "http://[::ffff:127.0.0.1]:{port}/", "http://2130706433:{port}/"],
)  # fmt: skip
def test_a_loopback_or_private_url_is_refused_for_a_member(team, receivers, url: str) -> None:
    t = team()
    port = urlsplit(receivers().url).port  # a receiver does listen there: refused all the same
    r = t.clients["alice"].post("/api/webhooks", json={"url": url.format(port=port)})
    assert r.status_code == 422, r.text
    assert webhooks.ALLOW_SETTING in r.json()["detail"][0]["msg"] and r.json()["detail"][0]["loc"] == ["body", "url"]
    assert t.clients["alice"].get("/api/webhooks").json() == []


def test_what_a_member_may_do_with_webhooks(team, receivers) -> None:
    t = team(webhook_allow_private=True)
    hook = _add(t.clients["alice"], receivers().url)
    assert t.clients["vera"].post("/api/webhooks", json={"url": receivers().url}).status_code == 403  # a viewer
    for who in ("bob", "vera"):  # not hers to test or remove
        assert t.clients[who].post(f"/api/webhooks/{hook['id']}/test").status_code == 403
        assert t.clients[who].delete(f"/api/webhooks/{hook['id']}").status_code == 403
    assert t.clients["bob"].get("/api/webhooks").json() == []  # nor to list
    assert [h["id"] for h in t.clients["admin"].get("/api/webhooks").json()] == [hook["id"]]
    assert t.clients["alice"].post(f"/api/webhooks/{hook['id']}/test").json() == {"status": 200, "error": None}
    assert t.clients["alice"].delete(f"/api/webhooks/{hook['id']}").status_code == 204
    assert t.clients["alice"].get("/api/webhooks").json() == []
    actions = [e["action"] for e in t.clients["admin"].get("/api/audit").json()]
    assert {"webhook.add", "webhook.test", "webhook.remove"} <= set(actions)


def test_a_delivery_error_is_shown_to_the_hooks_owner_and_admins_only(team, receivers) -> None:
    t = team(webhook_allow_private=True)
    failing = receivers(statuses=[500])
    hook = _add(t.clients["alice"], failing.url)
    job_id = t.job_event("alice")
    t.deliver()
    assert [c[2] for c in failing.calls] == [500]
    for who, sees in (("alice", True), ("admin", True), ("bob", False), ("vera", False)):
        for path in (f"/api/jobs/{job_id}/notifications", f"/api/webhooks/{hook['id']}/deliveries"):
            [entry] = t.clients[who].get(path).json()
            assert (entry["last_status"], entry["webhook_id"], entry["event"]) == (500, hook["id"], "job.succeeded")
            assert entry["last_error"] == ("HTTP 500: ok" if sees else None), (who, path, entry)
            assert "secret-path" not in entry["url"]


@pytest.mark.parametrize(
    ("url", "addresses", "allow", "refused"),
    [("https://hooks.example.com/x", ["93.184.216.34"], False, None),
     ("https://hooks.example.com/x", ["2606:2800:220:1:248:1893:25c8:1946"], False, None),
     ("http://127.0.0.1:8080/", ["127.0.0.1"], False, "loopback"),
     ("http://127.0.0.1:8080/", ["127.0.0.1"], True, None),
     ("http://metadata/", ["169.254.169.254"], False, "link-local"),
     ("http://x/", ["93.184.216.34", "10.0.0.5"], False, "10.0.0.5"),  # any private address refuses it
     ("http://x/", ["::ffff:192.168.1.1"], False, "192.168.1.1"), ("http://x/", ["fe80::1%eth0"], False, "fe80"),
     ("http://x/", ["100.64.0.1"], False, "100.64.0.1"), ("http://x/", ["0.0.0.0"], False, "0.0.0.0"),
     ("ftp://hooks.example.com/", [], False, "http:// or https://"), ("hooks.example.com", [], False, "http://"),
     ("https:///x", [], False, "names a host"), ("https://u:p@hooks.example.com/", [], False, "no user name"),
     ("https://hooks.example.com:99999/", [], False, "not a URL")],
)  # fmt: skip
def test_where_a_webhook_may_point(url: str, addresses: list[str], allow: bool, refused: str | None) -> None:
    why = webhooks.url_shape_refusal(url) or webhooks.address_refusal("host", addresses, allow)
    assert (why is None) if refused is None else (refused in (why or "")), why


def test_webhooks_add_list_test_rm_from_the_cli(service, receivers, tmp_path) -> None:
    """`rankzero webhooks add|list|test|rm` as a member: the secret printed once signs the test event."""
    settings, admin = service(webhook_allow_private=True)
    made = admin.http.post("/users", json={"name": "alice", "role": "member"}).json()
    base = str(admin.http.base_url).removesuffix("/api/").removesuffix("/api")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RANKZERO_")}
    env |= {"RANKZERO_CONFIG_DIR": str(tmp_path / "c"), "RANKZERO_DATA_DIR": str(tmp_path / "d"), "COLUMNS": "300"}
    auth = ("--url", base, "--token", made["token"]["token"])

    def cli(*args: str, code: int = 0) -> str:
        out = subprocess.run([RANKZERO, *args, *auth], capture_output=True, text=True, timeout=120, env=env)
        assert out.returncode == code, (args, out.stdout, out.stderr)
        return out.stdout + out.stderr

    hers = receivers()
    added = cli("webhooks", "add", hers.url)
    secret = re.search(r"^([A-Za-z0-9_-]{43})$", added, re.MULTILINE)
    hook_id = re.search(r"^webhook (\d+) for alice", added, re.MULTILINE)
    assert secret is not None and hook_id is not None and "Shown once" in added, added
    listed = cli("webhooks", "list")
    assert hers.url in listed and "alice" in listed and secret[1] not in listed
    assert "the receiver answered 200" in cli("webhooks", "test", hook_id[1])
    [(headers, raw, _)] = hers.calls
    assert notify.signature_ok(secret[1], raw, headers["x-rankzero-signature"])
    assert json.loads(raw)["event"] == headers["x-rankzero-event"] == "webhook.test"
    refused = cli("webhooks", "add", "ftp://example.com/x", code=1)
    assert "http:// or https://" in refused, refused
    assert f"webhook {hook_id[1]} removed" in cli("webhooks", "rm", hook_id[1])
    assert hers.url not in cli("webhooks", "list")
