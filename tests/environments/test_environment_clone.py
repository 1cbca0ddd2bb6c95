"""A clone installs exactly the lock of the job it was cloned from (spec `environment.lock_from`), however long
after: the reuse window (RANKZERO_ENVIRONMENT_REUSE_S) is over and the index offers a newer version, yet the
clone, its restart and its other nodes get the old locked one, while a fresh job gets the newer one. Real uv
builds from a wheel folder made here (no network)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from tests.environments.conftest import make_wheel
from tests.support.jobs import DIGITS_SPEC
from trainer.spec import JobSpec
from worker.environments import EnvironmentFailed, prepare, record


def _spec(*packages: str, lock_from: int | None = None) -> JobSpec:
    env: dict[str, Any] = {"packages": list(packages)}
    if lock_from is not None:
        env["lock_from"] = lock_from
    return JobSpec.model_validate({"max_steps": 1, "environment": env})


def _version(python: Path, module: str) -> str:
    code = f"import {module}; print({module}.VERSION)"
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_clone_installs_its_sources_lock_a_day_later(env_settings, engine, new_job, tmp_path) -> None:
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "rzdemo", "1.0")
    make_wheel(wheels, "rzextra", "1.0")

    def host(name: str, **kw: Any):
        return env_settings(environment_offline=True, environment_find_links=wheels,
                            environment_dir=tmp_path / name, **kw)  # fmt: skip

    source_spec = _spec("rzdemo")
    source = new_job(source_spec.model_dump(mode="json"), status="succeeded")
    first = prepare(engine, host("a"), source, source_spec, None, tmp_path / "source.log")
    assert first is not None and _version(first.python, "rzdemo") == "1.0"

    # A day later: the reuse window is over (0 here: nothing is reused by age) and the index has 2.0.
    make_wheel(wheels, "rzdemo", "2.0")
    later = host("a", environment_reuse_s=0)
    clone_spec = _spec("rzdemo", lock_from=source)
    clone = new_job(clone_spec.model_dump(mode="json"))
    got = prepare(engine, later, clone, clone_spec, None, tmp_path / "clone.log")
    assert got is not None and got.key == first.key and got.cached  # the same lock: the same cached entry
    assert _version(got.python, "rzdemo") == "1.0"
    assert f"installing the lock of job {source}" in (tmp_path / "clone.log").read_text()
    clone_row, source_row = record.get(engine, clone), record.get(engine, source)
    assert clone_row is not None and source_row is not None and clone_row.lock == source_row.lock

    # The clone's restart, and its node 1 on a host with an empty cache, install that same lock.
    again = prepare(engine, later, clone, clone_spec, None, tmp_path / "restart.log")
    node1 = prepare(engine, host("b", environment_reuse_s=0), clone, clone_spec, None, tmp_path / "n1.log",
                    resolve=False)  # fmt: skip
    assert again is not None and node1 is not None and not node1.cached
    assert {_version(r.python, "rzdemo") for r in (again, node1)} == {"1.0"}

    # A fresh submit of the same requirements (no lock_from) resolves afresh: the newer version.
    fresh = new_job(source_spec.model_dump(mode="json"))
    newer = prepare(engine, later, fresh, source_spec, None, tmp_path / "fresh.log")
    assert newer is not None and _version(newer.python, "rzdemo") == "2.0"

    # A clone whose requirements were edited resolves them preferring the source's versions (as `uv lock` keeps
    # a lock file's): rzdemo stays at 1.0, only the added package is new.
    edited_spec = _spec("rzdemo", "rzextra", lock_from=source)
    edited = prepare(engine, later, new_job(edited_spec.model_dump(mode="json")), edited_spec, None,
                     tmp_path / "edited.log")  # fmt: skip
    assert edited is not None
    assert (_version(edited.python, "rzdemo"), _version(edited.python, "rzextra")) == ("1.0", "1.0")
    assert "preferring its locked versions" in (tmp_path / "edited.log").read_text()


def test_a_clone_of_a_job_without_a_lock_fails_saying_what_to_do(env_settings, engine, new_job, tmp_path) -> None:
    source = new_job(_spec("rzdemo").model_dump(mode="json"), status="failed")  # never prepared
    spec = _spec("rzdemo", lock_from=source)
    with pytest.raises(EnvironmentFailed, match=f"job {source} has no recorded lock.*remove lock_from"):
        prepare(engine, env_settings(), new_job(spec.model_dump(mode="json")), spec, None, tmp_path / "e.log")


def test_clone_and_edit_carries_the_lock_and_submit_checks_it(
    env_settings, engine, new_job, tmp_path, auth_headers
) -> None:
    from api.app import create_app
    from api.routes.ui import _prefill
    from core.tables import JobEnvironment

    settings = env_settings()
    built = new_job({**DIGITS_SPEC, "environment": {"packages": ["rzdemo"]}}, status="succeeded")
    bare = new_job(dict(DIGITS_SPEC), status="succeeded")
    never = new_job({**DIGITS_SPEC, "environment": {"packages": ["rzdemo"]}}, status="failed")
    with Session(engine) as s:
        s.add(JobEnvironment(job_id=built, input_hash="x", lock="rzdemo==1.0\n", state="ready"))
        s.commit()

    spec, note = _prefill(settings, built, None, {})
    assert spec is not None and spec["environment"] == {"packages": ["rzdemo"], "lock_from": built}
    assert note is not None and f"keep the versions job #{built} locked" in note
    spec, note = _prefill(settings, never, None, {})  # no lock to carry: resolved afresh, and said so
    assert spec is not None and "lock_from" not in spec["environment"] and "resolved afresh" in (note or "")
    spec, note = _prefill(settings, bare, None, {})
    assert spec is not None and "environment" not in spec and "packages" not in (note or "")

    def submit(lock_from: int) -> Any:
        body = {**DIGITS_SPEC, "environment": {"packages": ["rzdemo"], "lock_from": lock_from}}
        return client.post("/api/jobs", json=body)

    with TestClient(create_app(settings), headers=auth_headers) as client:
        assert submit(built).status_code == 201
        for source, says in ((bare, "names no environment"), (never, "ended without a lock"),
                             (999_999, "there is no job 999999")):  # fmt: skip
            r = submit(source)
            assert r.status_code == 422, r.text
            detail = r.json()["detail"][0]
            assert detail["loc"] == ["body", "environment", "lock_from"] and says in detail["msg"], detail
            assert "remove lock_from" in detail["msg"]


def test_a_sweeps_trials_share_its_first_trials_lock(env_settings, engine, new_job, tmp_path) -> None:
    """However long a sweep runs, its trials compare hyperparameters, not package versions."""
    from core.tables import Sweep, SweepTrial

    wheels = tmp_path / "wheels"
    make_wheel(wheels, "rzdemo", "1.0")
    settings = env_settings(environment_offline=True, environment_find_links=wheels,
                            environment_dir=tmp_path / "cache", environment_reuse_s=0)  # fmt: skip
    spec = _spec("rzdemo")
    trials = [new_job(spec.model_dump(mode="json")) for _ in range(2)]
    with Session(engine) as s:
        sweep = Sweep(name="s", spec={}, queue="default")
        s.add(sweep)
        s.flush()
        assert sweep.id is not None
        for number, job_id in enumerate(trials):
            s.add(SweepTrial(sweep_id=sweep.id, number=number, job_id=job_id, params={}))
        s.commit()
    first = prepare(engine, settings, trials[0], spec, None, tmp_path / "t0.log")
    make_wheel(wheels, "rzdemo", "2.0")  # the index moves on mid-sweep
    second = prepare(engine, settings, trials[1], spec, None, tmp_path / "t1.log")
    assert first is not None and second is not None and second.key == first.key
    assert _version(second.python, "rzdemo") == "1.0"
    outside = prepare(engine, settings, new_job(spec.model_dump(mode="json")), spec, None, tmp_path / "o.log")
    assert outside is not None and _version(outside.python, "rzdemo") == "2.0"  # not a trial: resolved afresh


@pytest.mark.parametrize(
    ("environment", "locked", "relock", "carried", "says"),
    [
        (None, False, False, None, ""),
        ({"packages": ["six"]}, True, False, 7, "keep the versions job 7 locked"),
        ({"packages": ["six"]}, False, False, None, "resolved afresh (job 7 has no lock yet)"),
        ({"packages": ["six"], "lock_from": 3}, False, False, 3, "keep the versions job 3 locked"),  # its source's
        ({"packages": ["six"], "lock_from": 3}, True, True, None, "resolved afresh (--relock)"),
    ],
)
def test_rankzero_clone_spec(environment, locked, relock, carried, says) -> None:
    from cli.clone_command import clone_spec

    spec = {"name": "j", **({"environment": environment} if environment else {})}
    got, words = clone_spec(spec, 7, locked, relock)
    assert (got.get("environment") or {}).get("lock_from") == carried and says in words


def test_rankzero_clone_keeps_the_lock_unless_relock(service, tmp_path) -> None:
    from core.db import get_engine
    from core.tables import JobEnvironment
    from tests.support.commands import RANKZERO, ROOT

    settings, client = service()
    url = str(client.http.base_url).removesuffix("/api/").removesuffix("/api")
    source = client.submit({**DIGITS_SPEC, "name": "src", "environment": {"packages": ["six"]}})["id"]
    with Session(get_engine(settings.resolved_database_url)) as s:  # as its first start would have recorded
        s.add(JobEnvironment(job_id=source, input_hash="x", lock="six==1.16.0\n", state="ready",
                             packages=[{"name": "six", "version": "1.16.0"}]))  # fmt: skip
        s.commit()
    env = {**os.environ, "RANKZERO_URL": url, "RANKZERO_API_TOKEN": settings.token(), "COLUMNS": "200"}

    def clone(*args: str) -> dict[str, Any]:
        done = subprocess.run([RANKZERO, "clone", str(source), *args], capture_output=True, text=True, env=env,
                              cwd=ROOT, timeout=90, check=False)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        new_id = int(done.stdout.split("job ", 1)[1].split()[0])
        return {"out": done.stdout, **client.job(new_id)}

    kept = clone("--set", "max_steps=3")
    assert kept["spec"]["environment"] == {"packages": ["six"], "requirements": None, "lock_from": source}
    assert kept["spec"]["max_steps"] == 3 and kept["name"] == "src-copy"
    assert f"keep the versions job {source} locked" in kept["out"]
    fresh = clone("--relock", "--name", "fresh")
    assert fresh["spec"]["environment"].get("lock_from") is None and fresh["name"] == "fresh"
    assert "resolved afresh (--relock)" in fresh["out"]


def test_a_job_waiting_for_its_environment_reads_waiting_not_404(env_settings, new_job, auth_headers) -> None:
    from api.app import create_app
    from cli.environment_commands import environment_summary

    waiting = new_job({**DIGITS_SPEC, "environment": {"packages": ["six"]}}, status="queued")
    none = new_job(dict(DIGITS_SPEC), status="queued")
    with TestClient(create_app(env_settings()), headers=auth_headers) as client:
        r = client.get(f"/api/jobs/{waiting}/environment")
        assert r.status_code == 200 and r.json()["state"] == "waiting" and r.json()["packages"] == []
        assert environment_summary(r.json()) == "environment waiting: prepared when the job starts"
        r = client.get(f"/api/jobs/{none}/environment")
        assert r.status_code == 404 and "names no environment" in r.json()["detail"]
