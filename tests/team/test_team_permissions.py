"""One table of who may do what (issue 37, core/permissions.py), held by every route that changes state.

The walk reads /openapi.json: every state-changing route must be in the table, and each is called as an
admin, a member, a viewer and a worker host's credential, on a target the caller owns and on one she
does not; each call is refused (403) exactly when the table says so. Allowed calls may still fail for
their own reasons (a queued job cannot be deleted: 409), never with a 403. docs/api.md carries the table.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func
from sqlmodel import Session, select

from api.app import create_app
from core import permissions
from core.db import get_engine
from core.settings import Settings
from core.sweeps import store
from core.sweeps.space import SweepSpec
from core.tables import AuditEvent, JobStatus, Webhook
from tests.support.jobs import fake_spec
from tests.support.rows import insert_job
from tests.support.settings import API_TOKEN

ROOT = Path(__file__).resolve().parents[2]
UNSAFE = {"post", "put", "patch", "delete"}
SWEEP = {
    "name": "walk",
    "job": fake_spec("walk"),
    "trials": 2,
    "parallel": 1,
    "parameters": {"optimizer.lr": {"log_uniform": [0.001, 0.1]}},
}
_serial = itertools.count(1)
# A worker's shipping of a job's files is the job's own output arriving, not a person's change: not audited.
NOT_AUDITED = {"artifact.ship"}


def _bundle() -> bytes:
    """A code bundle of its own content each time (uploaders are recorded per bundle)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        data = f"print({next(_serial)})\n".encode()
        info = tarfile.TarInfo("train.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return raw.getvalue()


class Team:
    """A live app (in-process) with an admin, two members (alice acts, bob owns the others' targets), a viewer
    and a worker host's credential; targets are made as each call needs them."""

    def __init__(self, settings: Settings, app: Any) -> None:
        self.settings = settings
        self.app = app
        self.admin = self.client(API_TOKEN)
        self.ids: dict[str, int] = {"admin": 1}
        self.clients: dict[str, TestClient] = {"admin": self.admin}
        for name, role in (("alice", "member"), ("bob", "member"), ("vera", "viewer")):
            r = self.admin.post("/api/users", json={"name": name, "role": role})
            assert r.status_code == 201, r.text
            self.ids[name] = r.json()["user"]["id"]
            self.clients[name] = self.client(r.json()["token"]["token"])
        r = self.admin.post("/api/workers", json={"host": "walker"})
        assert r.status_code == 201, r.text
        self.clients["worker"] = self.client(r.json()["token"])
        self.names = {"admin": "admin", "member": "alice", "viewer": "vera", "worker": "worker"}

    def client(self, token: str) -> TestClient:
        return TestClient(self.app, headers={"Authorization": f"Bearer {token}"})

    def job(self, owner: str, status: JobStatus = JobStatus.queued) -> int:
        with Session(get_engine(self.settings.resolved_database_url)) as db:
            job = insert_job(db, f"j{next(_serial)}", status, owner_id=self.ids.get(owner))
            db.commit()
            return int(job.id or 0)

    def sweep(self, owner: str, status: str = "running") -> int:
        with Session(get_engine(self.settings.resolved_database_url)) as db:
            row = store.create(db, SweepSpec.model_validate(SWEEP), "default", owner_id=self.ids.get(owner))
            store.set_status(db, int(row.id or 0), status, ("running",))
            db.commit()
            return int(row.id or 0)

    def bundle(self, owner: str) -> str:
        uploader = self.clients[owner] if owner in ("alice", "bob", "admin") else self.admin
        body = _bundle()
        r = uploader.post("/api/code", content=body, headers={"Content-Type": "application/gzip"})
        assert r.status_code in (200, 201), r.text
        return hashlib.sha256(body).hexdigest()

    def newest_audit(self) -> int:
        with Session(get_engine(self.settings.resolved_database_url)) as db:
            return int(db.exec(select(func.max(AuditEvent.id))).one() or 0)

    def webhook(self, owner: str) -> int:
        """A webhook of `owner`'s, made in the database (a viewer may own one from before she was a viewer). Its
        host does not resolve: a test of it answers with the error, and nothing leaves the machine."""
        with Session(get_engine(self.settings.resolved_database_url)) as db:
            hook = Webhook(owner_id=self.ids[owner], url=f"https://hook{next(_serial)}.invalid/x", secret="s")
            db.add(hook)
            db.commit()
            return int(hook.id or 0)

    def token(self, owner: str) -> int:
        r = self.admin.post(f"/api/users/{owner}/tokens", json={"name": f"t{next(_serial)}"})
        assert r.status_code == 201, r.text
        return r.json()["id"]


def _body(method: str, path: str) -> dict[str, Any]:
    """What the route is sent (keyword args of `request`): enough to reach its permission check."""
    n = next(_serial)
    if path.startswith("/api/artifacts/"):
        body = b"hello\n"
        return {"content": body, "headers": {"X-Content-SHA256": hashlib.sha256(body).hexdigest()}}
    bodies: dict[tuple[str, str], dict[str, Any]] = {
        ("POST", "/api/jobs"): {"json": fake_spec(f"s{n}")},
        ("PATCH", "/api/jobs/{job_id}"): {"json": {"priority": 1}},
        ("PATCH", "/api/jobs/{job_id}/annotations"): {"json": {"note": "x"}},
        ("POST", "/api/jobs/{job_id}/console-patterns"): {"json": {"regex": "acc (?P<value>[0-9.]+)", "name": "acc"}},
        ("POST", "/api/sweeps"): {"json": SWEEP},
        ("POST", "/api/sweeps/{sweep_id}/extend-best"): {"json": {}},
        ("POST", "/api/code"): {"content": _bundle(), "headers": {"Content-Type": "application/gzip"}},
        ("PUT", "/api/code/{sha256}/left-out"): {"json": {"entries": []}},
        ("POST", "/api/users/{name}/tokens"): {"json": {"name": f"t{n}"}},
        ("POST", "/api/users"): {"json": {"name": f"u{n}", "role": "viewer"}},
        ("PATCH", "/api/users/{name}"): {"json": {"max_queued": 7}},
        ("POST", "/api/workers"): {"json": {"host": f"h{n}"}},
        ("POST", "/api/webhooks"): {"json": {"url": f"https://hook{n}.invalid/x"}},
    }
    return bodies.get((method, path), {})


def _url(team: Team, method: str, path: str, owner: str) -> str:
    """`path` with each parameter a target owned by `owner` (made now), or one no one owns."""
    values: dict[str, Any] = {"path": "logs/x.txt"}
    if "{job_id}" in path:
        status = JobStatus.succeeded if method == "DELETE" else JobStatus.queued
        values["job_id"] = team.job(owner, status)
    if "{sweep_id}" in path:
        values["sweep_id"] = team.sweep(owner, "paused" if path.endswith("/resume") else "running")
    if "{webhook_id}" in path:
        values["webhook_id"] = team.webhook(owner)
    if "{token_id}" in path:
        values["token_id"] = team.token(owner)
    if "{sha256}" in path:
        values["sha256"] = team.bundle(owner)
    if "{host}" in path:  # a host of its own, so the walk's own worker credential is never revoked
        values["host"] = f"h{next(_serial)}"
        assert team.admin.post("/api/workers", json={"host": values["host"]}).status_code == 201
    if "{name}" in path:
        values["name"] = {"/api/users/{name}/tokens": owner, "/api/users/{name}": "bob"}.get(path, "no-such-host")
    return path.format(**values)


@pytest.fixture
def team(api_settings: Callable[..., Settings]) -> Iterator[Team]:
    settings = api_settings()
    app = create_app(settings)
    with TestClient(app):  # runs the lifespan: migrations
        yield Team(settings, app)


def _state_changing(team: Team) -> set[tuple[str, str]]:
    paths = team.admin.get("/openapi.json").json()["paths"]
    return {(m.upper(), p) for p, ops in paths.items() for m in ops if m in UNSAFE}


def test_every_state_changing_route_is_in_the_table(team: Team) -> None:
    routes = _state_changing(team)
    assert routes - set(permissions.ROUTES) == set(), "a route that changes state has no rule in core/permissions.py"
    assert set(permissions.ROUTES) - routes == set(), "the table names a route the API does not have"
    assert set(permissions.ROUTES.values()) <= set(permissions.ACTIONS)


def test_each_role_owner_and_not_is_refused_exactly_as_the_table_says(team: Team) -> None:
    seen: list[str] = []
    for (method, path), action in sorted(permissions.ROUTES.items()):
        for role, own in itertools.product(("admin", "member", "viewer", "worker"), (True, False)):
            if role == "worker" and own:
                continue  # a worker credential owns nothing
            caller = team.names[role]
            owner = caller if own and role != "worker" else "bob"
            url = _url(team, method, path, owner)
            before = team.newest_audit()
            r = team.clients[caller].request(method, url, **_body(method, path))
            may = permissions.allowed(role, action, own)  # pyright: ignore[reportArgumentType]
            seen.append(f"{role} {'own' if own else 'other'} {method} {path} {r.status_code}")
            if may:
                assert r.status_code != 403, (role, own, action, url, r.text)
                if r.is_success and action not in NOT_AUDITED:  # every state change is audited (issue 37)
                    assert team.newest_audit() > before, (role, action, url, "no audit entry")
            else:
                assert r.status_code == 403, (role, own, action, url, r.status_code, r.text)
    assert len(seen) > 100


def test_the_docs_carry_the_table() -> None:
    docs = (ROOT / "docs" / "api.md").read_text()
    assert permissions.markdown() in docs, "docs/api.md's table is stale: paste `python -m core.permissions` there"


def test_a_worker_credential_does_a_workers_work_only(team: Team) -> None:
    worker = team.clients["worker"]
    for method, path, kw in (
        ("get", "/api/users", {}),
        ("get", "/api/audit", {}),
        ("get", "/api/jobs", {}),
        ("post", "/api/jobs", {"json": fake_spec("w")}),
        ("get", "/api/me", {}),
    ):
        r = worker.request(method, path, **kw)
        assert r.status_code == 403, (path, r.text)
        assert "worker" in r.json()["detail"]
    assert worker.get("/api/workers/me").json() == {"host": "walker"}
    sha = team.bundle("alice")
    assert worker.get(f"/api/code/{sha}").status_code == 200
    listed = team.admin.get("/api/workers").json()
    assert [w["host"] for w in listed] == ["walker"] and listed[0]["revoked_at"] is None
    assert all(u["name"] != "worker.walker" for u in team.admin.get("/api/users").json())
    # Revoked per host: that host is refused at once, another host's credential keeps working.
    other = team.client(team.admin.post("/api/workers", json={"host": "other"}).json()["token"])
    assert team.admin.post("/api/workers/walker/revoke").status_code == 200
    assert worker.get("/api/workers/me").status_code == 401
    assert other.get("/api/workers/me").json() == {"host": "other"}
    actions = [e["action"] for e in team.admin.get("/api/audit").json()]
    assert "worker.revoke" in actions and "worker.add" in actions
    # A member cannot make one, nor be made one through the users' routes.
    assert team.clients["alice"].post("/api/workers", json={"host": "mine"}).status_code == 403
    assert team.admin.patch("/api/users/worker.walker", json={"role": "admin"}).status_code == 404


def test_a_worker_credential_signs_no_one_in(team: Team) -> None:
    token = team.admin.post("/api/workers", json={"host": "signer"}).json()["token"]
    with TestClient(team.app) as browser:
        r = browser.post(
            "/login", data={"token": token}, headers={"Origin": "http://testserver"}, follow_redirects=False
        )
        assert r.status_code == 403 and "signs no one in" in r.text
        assert "rankzero_session" not in r.cookies
