"""Bad input is refused with a clear 4xx and nothing is written: auth, sizes, nesting, NaN,
user code, path traversal in every path-bearing field and route, job ids of another shape."""

from __future__ import annotations

import http.client
import json
import os
from urllib.parse import urlsplit

import pytest
from fastapi.testclient import TestClient

from api.auth import CSRF_COOKIE, CSRF_HEADER, SESSION_COOKIE, _serializer
from api.server import UnsafeBind, check_bind
from core.settings import Settings
from core.tables import Checkpoint, JobStatus
from trainer.run_dir import job_run_dir


def _jobs(client: TestClient) -> int:
    return client.get("/api/jobs").json()["total"]


def test_missing_or_wrong_token_is_401(anon_client: TestClient) -> None:
    assert anon_client.get("/api/jobs").status_code == 401
    r = anon_client.get("/api/jobs", headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert anon_client.get("/api/jobs", headers={"Authorization": "Basic dGVzdA=="}).status_code == 401
    assert anon_client.post("/api/jobs", json={}).status_code == 401
    for path in (
        "/api/jobs/1",
        "/api/jobs/1/metrics",
        "/api/jobs/1/logs",
        "/api/jobs/1/stream",
        "/api/jobs/1/checkpoints",
        "/api/checkpoints/1/download",
        "/api/schema/job-spec",
    ):
        assert anon_client.get(path).status_code == 401, path
    assert anon_client.get("/api/health").status_code == 200


def test_session_cookie_needs_csrf_for_unsafe_methods(anon_client: TestClient, settings: Settings, spec: dict) -> None:
    signed_in = anon_client.post("/login", data={"token": settings.token()}, follow_redirects=False)
    assert signed_in.status_code == 303, signed_in.text
    csrf = anon_client.cookies[CSRF_COOKIE]
    assert anon_client.get("/api/jobs").status_code == 200
    assert anon_client.post("/api/jobs", json=spec).status_code == 403
    assert anon_client.post("/api/jobs", json=spec, headers={CSRF_HEADER: "other"}).status_code == 403
    assert anon_client.post("/api/jobs", json=spec, headers={CSRF_HEADER: csrf}).status_code == 201
    # A cookie the server did not sign, or one signed by it for no open session, opens nothing.
    anon_client.cookies.set(SESSION_COOKIE, "forged.cookie.value")
    assert anon_client.get("/api/jobs").status_code == 401
    anon_client.cookies.set(SESSION_COOKIE, _serializer(settings).dumps({"csrf": csrf}))
    assert anon_client.get("/api/jobs").status_code == 401


@pytest.mark.parametrize(
    "patch, loc",
    [
        ({"batch_size": 0}, ["body", "batch_size"]),
        ({"batch_size": 10**12}, ["body", "batch_size"]),
        ({"nproc": 0}, ["body", "nproc"]),
        ({"max_steps": 10**30}, ["body", "max_steps"]),
        ({"unknown": True}, ["body", "unknown"]),
        ({"model": {"name": "mlp", "extra": 1}}, ["body", "model", "extra"]),
        ({"nnodes": 2}, ["body", "nnodes"]),
        ({"model": {"name": "os:system"}}, ["body", "model", "name"]),
        ({"data": {"name": "subprocess:run"}}, ["body", "data", "name"]),
    ],
)
def test_spec_refusals_name_the_field(client: TestClient, spec: dict, patch: dict, loc: list) -> None:
    before = _jobs(client)
    r = client.post("/api/jobs", json={**spec, **patch})
    assert r.status_code == 422, r.text
    assert loc in [e["loc"] for e in r.json()["detail"]], r.json()
    assert _jobs(client) == before


@pytest.mark.parametrize(
    ("patch", "loc", "says"),
    [({"model": {"name": "mlp", "args": {"hiden": 64}}}, ["body", "model", "args"],
      "unknown model arg 'hiden' for mlp; did you mean 'hidden'?"),
     ({"model": {"name": "convnet", "args": {"num_class": 3}}}, ["body", "model", "args"],
      "unknown model arg 'num_class' for convnet; did you mean 'num_classes'?"),
     ({"data": {"name": "synthetic", "args": {"num_sampels": 64}}}, ["body", "data", "args"],
      "unknown data arg 'num_sampels' for synthetic; did you mean 'num_samples'?")],
)  # fmt: skip
def test_an_unknown_builtin_arg_is_refused_at_submit_naming_the_nearest(
    client: TestClient, spec: dict, patch: dict, loc: list, says: str
) -> None:
    """A typo in model.args failed only once the job ran; one in data.args was silently ignored (issue 37)."""
    before = _jobs(client)
    r = client.post("/api/jobs", json={**spec, **patch})
    assert r.status_code == 422, r.text
    assert {"loc": loc, "msg": says} in [{"loc": e["loc"], "msg": e["msg"]} for e in r.json()["detail"]], r.json()
    assert _jobs(client) == before


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_inf_are_refused(client: TestClient, spec: dict, number: str) -> None:
    body = json.dumps(spec)[:-1] + f', "grad_clip_norm": {number}}}'
    r = client.post("/api/jobs", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422 and ["body", "grad_clip_norm"] in [e["loc"] for e in r.json()["detail"]]
    nested = {**spec, "model": {"name": "mlp", "args": {"dropout": 0.5}}}
    body = json.dumps(nested).replace('"dropout": 0.5', f'"dropout": {number}')
    assert client.post("/api/jobs", content=body, headers={"content-type": "application/json"}).status_code == 422


def test_user_code_only_from_allowed_prefixes(api_settings, database_url: str, auth_headers: dict, spec: dict) -> None:
    from api.app import create_app

    settings = api_settings(database_url=database_url, allowed_code="myorg.models, labcode")
    with TestClient(create_app(settings), headers=auth_headers) as c:
        ok = {**spec, "model": {"name": "myorg.models.nets:build"}, "data": {"name": "labcode:data"}}
        assert c.post("/api/jobs", json=ok).status_code == 201
        for bad in ("myorgevil:build", "myorg:build", "os.path:join", "labcodex.y:z"):
            r = c.post("/api/jobs", json={**spec, "model": {"name": bad}})
            assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "model", "name"], bad


def test_oversized_bodies_are_413(client: TestClient, settings: Settings, spec: dict) -> None:
    big = b'{"name": "' + b"a" * (settings.max_body_bytes + 10) + b'"}'
    r = client.post("/api/jobs", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413 and "larger than" in r.json()["detail"]

    def chunks():
        for _ in range(settings.max_body_bytes // 4096 + 2):
            yield b" " * 4096

    r = client.post("/api/jobs", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413


def test_oversized_chunked_body_over_a_real_socket(live_api, settings: Settings, auth_headers: dict) -> None:
    base = urlsplit(live_api(settings))
    conn = http.client.HTTPConnection(base.hostname, base.port, timeout=10)
    conn.putrequest("POST", "/api/jobs")
    conn.putheader("Authorization", auth_headers["Authorization"])
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Transfer-Encoding", "chunked")
    conn.endheaders()
    try:
        for _ in range(settings.max_body_bytes // 65536 + 2):
            conn.send(b"10000\r\n" + b" " * 65536 + b"\r\n")
        conn.send(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server may answer and close before the whole body is sent
    assert conn.getresponse().status == 413


def test_deeply_nested_json_is_400(client: TestClient, spec: dict) -> None:
    body = '{"name": "x", "model": {"name": "mlp", "args": {"a": ' + "[" * 5000 + "]" * 5000 + "}}}"
    r = client.post("/api/jobs", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400 and "deeper" in r.json()["detail"]
    shallow = {**spec, "model": {"name": "mlp", "args": {"hidden": [[[[[[[1]]]]]]]}}}
    assert client.post("/api/jobs", json=shallow).status_code == 422  # the spec's own args depth rule


def test_resume_from_must_stay_inside_the_runs_dir(
    client: TestClient, settings: Settings, spec: dict, tmp_path
) -> None:
    runs = settings.resolved_runs_dir
    good = runs / "7" / "checkpoints" / "step_00000010.pt"
    good.parent.mkdir(parents=True)
    good.write_bytes(b"ckpt")
    outside = tmp_path / "outside.pt"
    outside.write_bytes(b"evil")
    os.symlink(outside, runs / "7" / "checkpoints" / "link.pt")
    os.symlink(tmp_path, runs / "escape")
    before = _jobs(client)
    for bad in (
        "../outside.pt",
        str(outside),
        "/etc/passwd",
        "7/../../outside.pt",
        "7/checkpoints/link.pt",
        "escape/outside.pt",
        "..%2Foutside.pt",
        "%252e%252e/outside.pt",
        "7/checkpoints/step\x00.pt",
        "7/checkpoints/missing.pt",
    ):
        r = client.post("/api/jobs", json={**spec, "resume_from": bad})
        assert r.status_code == 422, bad
        assert ["body", "resume_from"] in [e["loc"] for e in r.json()["detail"]], (bad, r.json())
    assert _jobs(client) == before
    for ok in ("7/checkpoints/step_00000010.pt", str(good)):
        r = client.post("/api/jobs", json={**spec, "resume_from": ok})
        # Stored as its key (relative to the runs dir): the same file on every host, never the API's path.
        assert r.status_code == 201 and r.json()["spec"]["resume_from"] == "7/checkpoints/step_00000010.pt"


def test_checkpoint_rows_pointing_outside_are_not_served(
    client: TestClient, make_job, db, settings: Settings, tmp_path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    job = make_job()
    run = job_run_dir(settings.resolved_runs_dir, job.id)
    (run / "checkpoints").mkdir(parents=True)
    os.symlink(secret, run / "checkpoints" / "step_00000002.pt")
    rows = [
        Checkpoint(job_id=job.id, step=i, path=p, bytes=1, sha256="0" * 64)
        for i, p in enumerate(
            [
                "../../secret.txt",
                str(secret),
                "checkpoints/step_00000002.pt",
                "checkpoints/%2e%2e/x",
                "checkpoints/\x01",
            ]
        )
    ]
    db.add_all(rows)
    db.commit()
    for row in rows:
        r = client.get(f"/api/checkpoints/{row.id}/download")
        assert r.status_code == 404 and "top secret" not in r.text, row.path
    for path in (
        "/api/jobs/1/../../etc/passwd",
        "/api/jobs/%2e%2e/logs",
        "/api/jobs/%252e%252e/logs",
        "/api/checkpoints/..%2F..%2Fetc%2Fpasswd/download",
        "/api/jobs/1%00/logs",
        "/static/../api/settings.py",
        "/static/..%2f..%2fapi%2fsettings.py",
        "/static/%252e%252e/api/settings.py",
    ):
        r = client.get(path)
        assert r.status_code in (404, 422) and "LOOPBACK_HOSTS" not in r.text, path


def test_log_route_refuses_symlinks_out_and_bad_params(
    client: TestClient, make_job, settings: Settings, tmp_path
) -> None:
    job = make_job()
    secret = tmp_path / "secret.log"
    secret.write_text("top secret")
    rank_dir = job_run_dir(settings.resolved_runs_dir, job.id) / "logs" / "attempt_1" / "r1" / "attempt_0" / "0"
    rank_dir.mkdir(parents=True)
    os.symlink(secret, rank_dir / "stderr.log")
    r = client.get(f"/api/jobs/{job.id}/logs")
    assert r.status_code == 404 and "top secret" not in r.text
    for params in ({"rank": -1}, {"rank": "../0"}, {"stream": "../../etc/passwd"}, {"offset": -5}, {"tail": 0}):
        assert client.get(f"/api/jobs/{job.id}/logs", params=params).status_code == 422, params


def test_job_with_a_run_dir_outside_is_not_read(client: TestClient, make_job, tmp_path) -> None:
    job = make_job(run_dir=str(tmp_path))
    assert client.get(f"/api/jobs/{job.id}/logs").status_code == 404


def test_non_loopback_bind_needs_a_configured_token(tmp_path) -> None:
    check_bind(Settings(data_dir=tmp_path, host="127.0.0.1"))
    check_bind(Settings(data_dir=tmp_path, host="::1"))
    check_bind(Settings(data_dir=tmp_path, host="0.0.0.0", api_token="chosen-token-" + "0" * 32))
    for host in ("0.0.0.0", "::", "192.168.1.5", "example.com"):
        with pytest.raises(UnsafeBind, match="RANKZERO_API_TOKEN"):
            check_bind(Settings(data_dir=tmp_path, host=host))


def test_unstorable_text_is_refused_and_nothing_breaks(client: TestClient, spec: dict, make_job) -> None:
    before = _jobs(client)
    for body in (
        b'{"name": "x", "max_steps": 5, "model": {"name": "mlp", "args": {"hidden": "\\ud800"}}}',
        b'{"name": "x", "max_steps": 5, "model": {"name": "mlp", "args": {"hidden": "a\\u0000b"}}}',
        b'{"name": "x", "max_steps": 5, "model": {"name": "mlp", "args": {"k\\u0000": 1}}}',
        b'{"name": "x", "max_steps": ' + b"9" * 5000 + b"}",
        b"\xff\xfe",
        b"",
    ):
        r = client.post("/api/jobs", content=body, headers={"content-type": "application/json"})
        assert r.status_code in (400, 422), (body[:60], r.status_code, r.text)
    assert _jobs(client) == before
    for params in ({"name": "\x00"}, {"name": "a\x00b"}, {"name": "é"}):
        assert client.get("/api/jobs", params=params).status_code == 422
    assert client.get("/api/jobs/1/metrics", params={"name": "\x00"}).status_code in (404, 422)
    done = make_job(status=JobStatus.succeeded)
    r = client.get(f"/api/jobs/{done.id}/stream", headers={"Last-Event-ID": "²".encode("latin-1")})
    assert r.status_code == 200 and "event: end" in r.text


def test_json_depth_ignores_brackets_inside_strings() -> None:
    from api.limits import json_depth

    assert json_depth(b'{"a": "[[[[{{{{", "b": [1, {"c": "]]]\\"[["}]}') == 3
    assert json_depth(b"[" * 40 + b"]" * 40) == 40
    assert json_depth(b'"just a string"') == 0
