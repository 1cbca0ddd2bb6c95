"""worker/environments/ `prepare` with real uv builds: from PyPI (a tiny pure-Python package the service does
not have) and from an offline wheel folder made here. No worker: the job rows are made by hand."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.environments.conftest import PACKAGE, make_wheel
from trainer.spec import JobSpec
from worker.environments import EnvironmentFailed, cache, prepare, record


def _spec(*packages: str, **kw) -> JobSpec:
    return JobSpec.model_validate({"max_steps": 1, "environment": {"packages": list(packages)}, **kw})


def _run(python: Path, code: str) -> str:
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_test_packages_are_not_the_services() -> None:
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.version("pyjokes")
    assert importlib.metadata.version("six") != "1.16.0"  # the service's six is another version


def test_built_once_then_cached_and_shared_by_concurrent_jobs(env_settings, engine, new_job, tmp_path) -> None:
    # Its own cache: the session's may already hold this set from another test on this xdist worker.
    settings = env_settings(environment_dir=tmp_path / "environments")
    spec = _spec(PACKAGE)
    ids = [new_job(spec.model_dump(mode="json")) for _ in range(2)]
    got: dict[int, object] = {}

    def go(job_id: int) -> None:
        try:
            got[job_id] = prepare(engine, settings, job_id, spec, None, tmp_path / f"env{job_id}.log")
        except Exception as exc:  # surfaced below
            got[job_id] = exc

    threads = [threading.Thread(target=go, args=(i,)) for i in ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    first, second = (got[i] for i in ids)
    assert not isinstance(first, Exception) and not isinstance(second, Exception), got
    assert first is not None and second is not None
    assert first.key == second.key and first.python == second.python
    logs = [(tmp_path / f"env{i}.log").read_text() for i in ids]
    assert sum(text.count("$ uv venv") for text in logs) == 1, logs  # built once for the two jobs
    assert (
        _run(
            first.python,
            "import importlib.metadata as m, pyjokes, rankzero, trainer.spec, torch; print(m.version('pyjokes'))",
        )
        == "0.8.3"
    )
    # The entry is read-only, and on the job's row: its lock and packages.
    assert not (first.root / "bin").stat().st_mode & 0o222
    row = record.get(engine, ids[0])
    assert row is not None and row.state == "ready" and row.lock and "pyjokes==0.8.3" in row.lock
    assert {"name": "pyjokes", "version": "0.8.3"} in (row.packages or [])
    # A third job with the same set: no resolution (the lock is reused), no build.
    third = new_job(spec.model_dump(mode="json"))
    start = time.monotonic()
    ready = prepare(engine, settings, third, spec, None, tmp_path / "env3.log")
    took = time.monotonic() - start
    assert ready is not None and ready.cached and ready.key == first.key
    assert "$ uv" not in (tmp_path / "env3.log").read_text()
    print(f"cached start of a third job with the same set: {took * 1000:.0f} ms")  # figure for the log
    third_row = record.get(engine, third)
    assert third_row is not None and third_row.cached and third_row.lock == row.lock


def test_bad_requirement_fails_with_uvs_message(env_settings, engine, new_job, tmp_path) -> None:
    settings = env_settings()
    spec = _spec("rankzero-no-such-package-q7x==1.0")
    job = new_job(spec.model_dump(mode="json"))
    with pytest.raises(EnvironmentFailed) as failed:
        prepare(engine, settings, job, spec, None, tmp_path / "env.log")
    message = str(failed.value)
    assert message.startswith("error: No solution found when resolving dependencies"), message
    assert "rankzero-no-such-package-q7x" in message
    row = record.get(engine, job)
    assert row is not None and row.state == "failed" and row.error == message


def test_older_pin_of_a_service_package_shadows_it_only_in_the_job(env_settings, engine, new_job, tmp_path) -> None:
    service_six = importlib.metadata.version("six")
    spec = _spec("six==1.16.0")
    ready = prepare(engine, env_settings(), new_job(spec.model_dump(mode="json")), spec, None, tmp_path / "e.log")
    assert ready is not None and ready.installed == 1
    assert _run(ready.python, "import six; print(six.__version__)") == "1.16.0"
    assert importlib.metadata.version("six") == service_six  # the service's own is untouched
    assert _run(Path(sys.executable), "import six; print(six.__version__)") == service_six


def test_lock_is_kept_on_restart_and_resume_when_a_newer_version_appears(
    env_settings, engine, new_job, tmp_path
) -> None:
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "rzdemo", "1.0")
    offline = env_settings(environment_offline=True, environment_find_links=wheels,
                           environment_dir=tmp_path / "cache")  # fmt: skip
    spec = _spec("rzdemo")
    first = new_job(spec.model_dump(mode="json"))
    ready = prepare(engine, offline, first, spec, None, tmp_path / "a1.log")
    assert ready is not None and _run(ready.python, "import rzdemo; print(rzdemo.VERSION)") == "1.0"
    make_wheel(wheels, "rzdemo", "2.0")  # the index now offers a newer version
    again = prepare(engine, offline, first, spec, None, tmp_path / "a2.log")  # a restart of the same job
    assert again is not None and again.cached and _run(again.python, "import rzdemo; print(rzdemo.VERSION)") == "1.0"
    # A resume of that job (another job whose resume_from is in its run dir) keeps its lock, whatever its age.
    fresh = env_settings(environment_offline=True, environment_find_links=wheels, environment_dir=tmp_path / "cache",
                         environment_reuse_s=0)  # fmt: skip
    resumed = _spec("rzdemo", resume_from=f"job_{first}/checkpoints/step_1.pt")
    r = prepare(engine, fresh, new_job(resumed.model_dump(mode="json")), resumed, None, tmp_path / "b.log")
    assert r is not None and r.key == ready.key
    # A new job that resolves afresh gets the newer one.
    other = new_job(spec.model_dump(mode="json"))
    newer = prepare(engine, fresh, other, spec, None, tmp_path / "c.log")
    assert newer is not None and _run(newer.python, "import rzdemo; print(rzdemo.VERSION)") == "2.0"


def test_cache_cap_evicts_the_least_recently_used_entry(env_settings, engine, new_job, tmp_path) -> None:
    wheels = tmp_path / "wheels"
    for v in ("1.0", "2.0", "3.0"):
        make_wheel(wheels, "rzdemo", v)
    root = tmp_path / "cache"
    settings = env_settings(environment_offline=True, environment_find_links=wheels, environment_dir=root,
                            environment_reuse_s=0)  # fmt: skip
    built = []
    for v in ("1.0", "2.0"):
        spec = _spec(f"rzdemo=={v}")
        ready = prepare(engine, settings, new_job(spec.model_dump(mode="json"), status="succeeded"), spec, None,
                        tmp_path / f"{v}.log")  # fmt: skip
        assert ready is not None
        built.append(ready.key)
        time.sleep(0.05)
    one = max(e.size for e in cache.entries(root))
    # Room for two entries: the third build evicts the least recently used one that no live job uses.
    # (model_copy: the setting's floor is 100 MB; these entries are a few hundred kB)
    settings = settings.model_copy(update={"environment_cache_max_bytes": 2 * one + one // 2})
    spec = _spec("rzdemo==3.0")
    third = prepare(engine, settings, new_job(spec.model_dump(mode="json")), spec, None, tmp_path / "3.log")
    assert third is not None
    left = {e.key for e in cache.entries(root)}
    assert left == {built[1], third.key}, (built, left)
    assert not (root / built[0]).exists()


def test_environments_off_fails_the_job_saying_so(env_settings, engine, new_job, tmp_path) -> None:
    spec = _spec(PACKAGE)
    with pytest.raises(EnvironmentFailed, match="RANKZERO_ENVIRONMENTS=off"):
        prepare(engine, env_settings(environments="off"), new_job(), spec, None, tmp_path / "e.log")
    assert (
        importlib.import_module("worker.environments.prepare").service().torch != "none"
    )  # the layering reads the service's torch


def test_every_node_installs_the_lock_node_zero_recorded(env_settings, engine, new_job, tmp_path) -> None:
    """Two hosts (a cache each, no shared disk): node 0 resolves; a newer version appears before node 1 builds;
    node 1 installs node 0's lock all the same. A node with no recorded lock refuses to resolve one itself."""
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "rzdemo", "1.0")

    def host(name: str):
        return env_settings(environment_offline=True, environment_find_links=wheels,
                            environment_dir=tmp_path / name / "environments")  # fmt: skip

    spec = _spec("rzdemo")
    job = new_job(spec.model_dump(mode="json"))
    node0 = prepare(engine, host("a"), job, spec, None, tmp_path / "node0.log")
    make_wheel(wheels, "rzdemo", "2.0")
    node1 = prepare(engine, host("b"), job, spec, None, tmp_path / "node1.log", resolve=False)
    assert node0 is not None and node1 is not None and node0.root != node1.root
    assert not node1.cached and node1.key == node0.key  # built on host b, from the same lock
    versions = {_run(r.python, "import rzdemo; print(rzdemo.VERSION)") for r in (node0, node1)}
    assert versions == {"1.0"}
    with pytest.raises(EnvironmentFailed, match="node 0 recorded no environment lock"):
        prepare(engine, host("b"), new_job(spec.model_dump(mode="json")), spec, None, tmp_path / "n.log",
                resolve=False)  # fmt: skip


def test_cache_cap_counts_uvs_download_cache(env_settings, engine, new_job, tmp_path) -> None:
    """uv's download cache lives in the environment dir and counts against the cap: entries that fit the cap
    alone, with uv's cache making the folder too big, stay; uv's cache is emptied and the folder fits."""
    wheels = tmp_path / "wheels"
    for v in ("1.0", "2.0"):
        make_wheel(wheels, "rzdemo", v)
    root = tmp_path / "cache"
    settings = env_settings(environment_offline=True, environment_find_links=wheels, environment_dir=root,
                            environment_reuse_s=0)  # fmt: skip
    keys = []
    for v in ("1.0", "2.0"):
        spec = _spec(f"rzdemo=={v}")
        ready = prepare(engine, settings, new_job(spec.model_dump(mode="json"), status="succeeded"), spec, None,
                        tmp_path / f"{v}.log")  # fmt: skip
        assert ready is not None
        keys.append(ready.key)
    uv_cache = root / cache.UV_CACHE
    assert any(p.is_file() for p in uv_cache.rglob("*")), "uv downloaded into the environment dir's own cache"
    whole = cache.disk_use(root)
    without_uv = _without(root, uv_cache)
    assert without_uv < whole  # uv's cache takes disk of its own, beyond the entries' (hard-linked) files
    cap = without_uv + (whole - without_uv) // 2  # the entries fit; the entries and uv's cache do not
    assert cache.evict(root, set(), cap) == []  # no entry had to go ...
    assert not uv_cache.exists() and cache.disk_use(root) <= cap  # ... uv's cache did, and the folder fits
    assert {e.key for e in cache.entries(root)} == set(keys)
    for key in keys:  # the entries kept their files (their own hard links)
        assert _run(cache.python_of(root, key), "import rzdemo; print(rzdemo.VERSION)") in {"1.0", "2.0"}


def _without(root: Path, folder: Path) -> int:
    """cache.disk_use(root) with the files of `folder` left out (hard links once, as it counts)."""
    seen, total = set(), 0
    for dirpath, dirs, files in os.walk(root):
        if Path(dirpath) == folder or Path(dirpath).is_relative_to(folder):
            continue
        for name in (*files, *dirs):
            path = Path(dirpath, name)
            st = path.lstat()
            if path != folder and (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total
