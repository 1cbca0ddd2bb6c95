"""`rankzero submit job.yaml --code DIR` as a user runs it, against a live API."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import httpx
import yaml

from core import bundles
from core.settings import Settings
from tests.support.commands import RANKZERO, ROOT
from tests.support.jobs import DIGITS_SPEC
from tests.support.settings import API_TOKEN


def _submit(spec: Path, code: Path, url: str) -> subprocess.CompletedProcess[str]:
    cache = spec.parent / "cache"  # the CLI's memory of packed trees: the test's own
    env = {
        **os.environ,
        "RANKZERO_URL": url,
        "RANKZERO_API_TOKEN": API_TOKEN,
        "COLUMNS": "200",
        "XDG_CACHE_HOME": str(cache),
    }
    return subprocess.run(
        [RANKZERO, "submit", str(spec), "--code", str(code)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )


def test_submit_with_code_uploads_once(settings: Settings, live_api, project: Path, tmp_path: Path) -> None:
    url = live_api(settings)
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({**DIGITS_SPEC, "nproc": 1, "model": {"name": "mypkg.models:build"}}))

    first = _submit(spec, project, url)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "6 files" in first.stdout and "compressed" in first.stdout and "job 1 queued" in first.stdout
    assert "nothing to upload" not in first.stdout
    (stored,) = bundles.store_dir(settings).glob("*.tar.gz")
    before = stored.stat()

    (project / "notes.log").write_text("ignored, so the tree is the same\n")
    second = _submit(spec, project, url)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "unchanged since the last submit and already on the server" in second.stdout
    assert "job 2 queued" in second.stdout
    assert stored.stat().st_mtime_ns == before.st_mtime_ns

    (tmp_path / "cache").rename(tmp_path / "forgotten")  # another machine, or a copy: packed again, same sha256
    third = _submit(spec, project, url)
    assert third.returncode == 0, third.stdout + third.stderr
    assert "already on the server, nothing to upload" in third.stdout and "job 3 queued" in third.stdout

    (project / "helpers.py").write_text("X = 2\n")
    fourth = _submit(spec, project, url)
    assert fourth.returncode == 0 and "nothing to upload" not in fourth.stdout
    assert len(list(bundles.store_dir(settings).glob("*.tar.gz"))) == 2

    # A script job: its line names the ranks, not the built-in trainer's (meaningless) global batch.
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"name": "script", "entrypoint": "helpers.py", "nproc": 2}))
    fifth = _submit(script, project, url)
    assert fifth.returncode == 0, fifth.stdout + fifth.stderr
    assert "job 5 queued: script (script × 2)" in fifth.stdout and "global batch" not in fifth.stdout, fifth.stdout

    headers = {"Authorization": f"Bearer {API_TOKEN}"}
    jobs = [httpx.get(f"{url}/api/jobs/{i}", headers=headers).json() for i in (1, 2, 3)]
    sha = stored.name.removesuffix(".tar.gz")
    assert {j["spec"]["code"] for j in jobs} == {f"sha256:{sha}"}


def test_submit_with_code_refused_names_the_limit(api_settings, live_api, project: Path, tmp_path: Path) -> None:
    url = live_api(api_settings(max_bundle_files=2))
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({**DIGITS_SPEC, "nproc": 1}))
    r = _submit(spec, project, url)
    assert r.returncode == 1
    assert "RANKZERO_MAX_BUNDLE_FILES" in r.stderr and ".rankzeroignore" in r.stderr
