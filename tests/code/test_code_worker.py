"""worker/bundles.py: a bundle found or fetched, unpacked once per host, read-only; retention."""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlmodel import Session

from core import bundles
from core.db import get_engine
from core.migrate import upgrade
from core.settings import Settings
from core.tables import Job, JobStatus
from tests.support.jobs import DIGITS_SPEC
from worker import bundles as worker_bundles


def _store(settings: Settings, folder: Path, tmp_path: Path) -> str:
    packed = bundles.pack(folder, tmp_path / "packed.tar.gz")
    tmp = bundles.incoming(settings)
    tmp.write_bytes(packed.archive.read_bytes())
    bundles.store(settings, tmp, packed.sha256)
    return packed.sha256


def test_shared_bundle_unpacked_once_by_two_jobs(settings: Settings, project: Path, tmp_path: Path, monkeypatch):
    sha = _store(settings, project, tmp_path)
    unpacks: list[Path] = []
    real_scan = bundles.scan

    def counting_scan(archive, limits, dest=None, on_member=None):
        if dest is not None:
            unpacks.append(dest)
            time.sleep(0.3)  # the second job arrives while the first is unpacking
        return real_scan(archive, limits, dest, on_member)

    monkeypatch.setattr(bundles, "scan", counting_scan)
    monkeypatch.setattr(worker_bundles, "KEEP_ALIVE_S", 0.05)
    results: list[Path] = []
    beats: list[str] = []  # each job's heartbeat while it unpacks or waits for the other's unpack
    spec = {**DIGITS_SPEC, "code": f"sha256:{sha}"}

    def job(name: str) -> None:
        results.append(worker_bundles.code_dir(spec, settings, keep_alive=lambda: beats.append(name)))

    threads = [threading.Thread(target=job, args=(name,)) for name in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(unpacks) == 1
    assert len(set(beats)) >= 1  # the job that waited kept its heartbeat going
    assert results[0] == results[1] == settings.data_dir / "bundles" / sha
    folder = results[0]
    assert (folder / "mypkg" / "models.py").is_file() and not (folder / ".git").exists()
    for path in [folder, *folder.rglob("*")]:
        assert stat.S_IMODE(path.stat().st_mode) & 0o222 == 0, path  # nothing writable
    assert worker_bundles.code_dir({**DIGITS_SPEC}, settings) is None
    env = worker_bundles.pythonpath_first({"PYTHONPATH": "/repo"}, folder)
    assert env["PYTHONPATH"] == f"{folder}{os.pathsep}/repo"
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".partial-")]


def test_fetched_from_the_api_when_not_shared(
    api_settings: Callable[..., Settings], settings: Settings, live_api, project, tmp_path
):
    sha = _store(settings, project, tmp_path)
    base = live_api(settings)
    elsewhere = tmp_path / "other-host"
    worker_settings = api_settings(data_dir=elsewhere / "data", runs_dir=elsewhere / "runs", api_url=base)
    folder = worker_bundles.ensure(worker_settings, f"sha256:{sha}")
    assert folder == elsewhere / "data" / "bundles" / sha
    assert (folder / "helpers.py").read_text() == "X = 1\n"
    assert not list((elsewhere / "runs").glob(".bundles/*"))  # cached per host, not stored as the API's

    lonely = api_settings(data_dir=tmp_path / "lonely" / "data", runs_dir=tmp_path / "lonely" / "runs")
    with pytest.raises(worker_bundles.BundleUnavailable, match="set RANKZERO_API_URL and RANKZERO_API_TOKEN"):
        worker_bundles.ensure(lonely, f"sha256:{sha}")
    wrong = api_settings(data_dir=tmp_path / "w" / "data", runs_dir=tmp_path / "w" / "runs", api_url=base)
    with pytest.raises(worker_bundles.BundleUnavailable, match="answered 404"):
        worker_bundles.ensure(wrong, f"sha256:{'b' * 64}")


def _job(settings: Settings, code: str, status: JobStatus, finished: datetime | None = None) -> None:
    with Session(get_engine(settings.resolved_database_url)) as s:
        s.add(Job(name="j", spec={**DIGITS_SPEC, "code": f"sha256:{code}"}, status=status, finished_at=finished))
        s.commit()


def test_retention(api_settings: Callable[..., Settings], tmp_path: Path):
    settings = api_settings(bundle_retention_s=3600)
    upgrade(settings.resolved_database_url)
    shas = {}
    for name in ("queued", "recent", "old", "orphan", "fresh"):
        folder = tmp_path / name
        folder.mkdir()
        (folder / f"{name}.py").write_text(name)
        shas[name] = _store(settings, folder, tmp_path)
    later = time.time() + 2 * 3600  # every archive is now older than the retention period …
    at_later = datetime.fromtimestamp(later, timezone.utc)
    _job(settings, shas["queued"], JobStatus.queued)
    _job(settings, shas["recent"], JobStatus.succeeded, finished=at_later - timedelta(seconds=60))
    _job(settings, shas["old"], JobStatus.failed, finished=at_later - timedelta(seconds=7200))
    fresh = bundles.archive_path(settings, shas["fresh"])
    os.utime(fresh, (later - 10, later - 10))  # … but this one, just uploaded (not yet submitted)
    for name in ("queued", "recent", "old", "orphan"):
        worker_bundles.ensure(settings, shas[name])
    os.utime(worker_bundles.cache_dir(settings) / shas["recent"], (later - 10, later - 10))

    removed = bundles.cleanup(settings, now=later)
    assert sorted(removed) == sorted([shas["old"], shas["orphan"]])
    for name in ("queued", "recent", "fresh"):
        assert bundles.is_stored(settings, shas[name]) and bundles.manifest_path(settings, shas[name]).exists()
    assert not bundles.manifest_path(settings, shas["old"]).exists()
    assert not bundles.files_path(settings, shas["old"]).exists()
    assert bundles.files_path(settings, shas["fresh"]).exists()

    pruned = worker_bundles.prune_cache(settings, bundles.referenced(settings, at_later), now=later)
    assert sorted(pruned) == sorted([shas["old"], shas["orphan"]])
    assert (worker_bundles.cache_dir(settings) / shas["queued"]).is_dir()
    assert not (worker_bundles.cache_dir(settings) / shas["old"]).exists()
    worker_bundles.sweep(settings, force=True)  # the loop's entry point: nothing more to remove, no error


def test_ranks_import_the_model_from_the_bundle(settings: Settings, tmp_path: Path, monkeypatch) -> None:
    """The real trainer under torchrun builds a model that exists only in the job's bundle."""
    from trainer.run_dir import RunDir
    from worker.launch import launch

    folder = tmp_path / "usercode"
    (folder / "zoo").mkdir(parents=True)
    (folder / "zoo" / "__init__.py").write_text("")
    (folder / "zoo" / "nets.py").write_text(
        "from torch import nn\n\n\ndef tiny(**kw):\n"
        "    return nn.Sequential(nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 10))\n"
    )
    sha = _store(settings, folder, tmp_path)
    spec = {
        **DIGITS_SPEC,
        "name": "bundle-model",
        "nproc": 1,
        "max_steps": 2,
        "device": "cpu",
        "model": {"name": "zoo.nets:tiny"},
        "code": f"sha256:{sha}",
        "checkpoint": {"every_steps": None, "every_epochs": None},
    }
    monkeypatch.delenv("PYTHONPATH", raising=False)
    code = worker_bundles.code_dir(spec, settings)
    run = RunDir(tmp_path / "runs" / "job_1")
    launched = launch(run, spec, 1, 1, 1, None, settings, code_dir=code)  # as worker/supervise.py calls it
    try:
        assert launched.proc.wait(timeout=240) == 0, launched.launcher_log.read_text()[-3000:]
    finally:
        if launched.proc.poll() is None:
            launched.proc.kill()
    assert '"type": "finished"' in run.events.read_text().replace('"type":"finished"', '"type": "finished"')
