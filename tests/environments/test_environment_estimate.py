"""At submit, a job whose requirements ask for another torch than the server's is told it gets a full
environment of its own and about how big (core/environments.py `own_torch`; POST /api/jobs
`environment_estimate`; `rankzero submit` prints it). Nothing is downloaded: the figure is this server's own
torch family's installed size, read from its metadata."""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient

from core.environments import FALLBACK_TORCH_BYTES, ServiceTorch, bundle_file, own_torch, service_torch
from tests.support.commands import RANKZERO, ROOT
from tests.support.jobs import DIGITS_SPEC

SERVICE = ServiceTorch({"torch": "2.14.1", "torchvision": "0.29.2", "nvidia-cublas": "13.1"}, 5_500_000_000)


@pytest.mark.parametrize(
    ("requirements", "own"),
    [
        (["einops", "timm==1.0.9"], None),  # no torch named: the service's
        (["torch"], None),  # any torch: resolves to the service's, nothing of its own
        (["torch>=2.0,<3"], None),  # the service's version fits
        (["torch==2.14.1", "torchvision==0.29.2"], None),
        (["torch==2.3.0"], ["torch==2.3.0"]),  # another torch: a full environment of its own
        (["torch<2", "six"], ["torch<2"]),
        (["torchvision==0.18.0"], ["torchvision==0.18.0"]),  # its torch is another one too
        (["torchaudio"], ["torchaudio"]),  # the service has none: the job's own
        (["Torch == 2.3.0 ; python_version >= '3'"], ["Torch == 2.3.0 ; python_version >= '3'"]),
        (["nvidia-cublas==12.1"], None),  # a CUDA wheel alone is an ordinary package of the job's
    ],
)
def test_own_torch_is_a_torch_the_service_does_not_have(requirements: list[str], own: list[str] | None) -> None:
    found = own_torch(requirements, SERVICE)
    assert (found.requirements if found else None) == own
    if found is not None:
        assert found.size_bytes == SERVICE.size_bytes and found.service_torch == "2.14.1"
        assert "about 5.5 GB on each host" in found.note() and "torch 2.14.1" in found.note()


def test_without_a_torch_to_measure_the_estimate_is_the_documented_figure() -> None:
    found = own_torch(["torch==2.3.0"], ServiceTorch({}, 0))
    assert found is not None and found.size_bytes == FALLBACK_TORCH_BYTES and "typical CUDA build" in found.basis
    assert "(no torch)" in found.note()


def test_the_servers_torch_is_measured_from_its_metadata() -> None:
    measured = service_torch()
    assert measured.versions.get("torch") not in (None, "") and measured.size_bytes > 50_000_000


def test_bundle_file_reads_one_small_member_of_a_gzip_tar(tmp_path: Path) -> None:
    folder = tmp_path / "code"
    (folder / "deps").mkdir(parents=True)
    (folder / "deps" / "prod.txt").write_text("torch==2.3.0\n")
    (folder / "big.txt").write_text("x" * 70_000)
    archive = tmp_path / "b.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder, arcname=".")
    assert bundle_file(archive, "deps/prod.txt") == "torch==2.3.0\n"
    assert bundle_file(archive, "big.txt") is None  # past the file cap
    assert bundle_file(archive, "missing.txt") is None
    assert bundle_file(archive, "deps/prod.txt", scan_bytes=0) is None  # past the scan budget
    assert bundle_file(tmp_path / "nothing.tar.gz", "deps/prod.txt") is None


def _upload(client: TestClient, folder: Path) -> str:
    from core import bundles

    packed = bundles.pack(folder, folder.parent / f"{folder.name}.tar.gz")
    r = client.post("/api/code", content=packed.archive.read_bytes(), headers={"Content-Type": "application/gzip"})
    assert r.status_code in (200, 201), r.text
    return f"sha256:{r.json()['sha256']}"


def test_submit_answers_with_the_estimate(env_settings, engine, auth_headers, tmp_path: Path) -> None:
    from api.app import create_app

    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("print('hi')\n")
    (project / "requirements.txt").write_text("einops\ntorch==1.13.1  # an old torch of our own\n")
    with TestClient(create_app(env_settings()), headers=auth_headers) as client:

        def submit(environment: dict[str, Any], script: dict[str, Any] | None = None) -> dict[str, Any]:
            r = client.post("/api/jobs", json={**(script or DIGITS_SPEC), "environment": environment})
            assert r.status_code == 201, r.text
            return r.json()

        assert submit({"packages": ["einops", "torch"]})["environment_estimate"] is None
        estimate = submit({"packages": ["torch==1.13.1"]})["environment_estimate"]
        assert estimate["requirements"] == ["torch==1.13.1"] and estimate["size_bytes"] == service_torch().size_bytes
        assert estimate["service_torch"] == service_torch().versions["torch"]
        assert "full environment of its own" in estimate["note"]
        # The requirements file in the bundle is read too.
        code = _upload(client, project)
        script = {"name": "own-torch", "code": code, "entrypoint": "train.py", "device": "cpu"}
        found = submit({"requirements": "requirements.txt"}, script)["environment_estimate"]
        assert found is not None and found["requirements"] == ["torch==1.13.1"]
        shown = client.get(f"/api/jobs/{submit({'packages': ['torch<1']})['id']}").json()
        assert shown.get("environment_estimate") is None  # only the submit's answer carries it


def test_rankzero_submit_prints_the_estimate(service, tmp_path: Path) -> None:
    settings, client = service()
    url = str(client.http.base_url).removesuffix("/api/").removesuffix("/api")
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({**DIGITS_SPEC, "name": "own-torch", "environment": {"packages": ["torch<1"]}}))
    env = {**os.environ, "RANKZERO_URL": url, "RANKZERO_API_TOKEN": settings.token(), "COLUMNS": "200"}
    done = subprocess.run([RANKZERO, "submit", str(spec)], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=90, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "queued" in done.stdout
    assert "environment: torch<1 is not this server's torch" in done.stdout, done.stdout
    assert f"about {service_torch().size_bytes / 1e9:.1f} GB on each host" in done.stdout
