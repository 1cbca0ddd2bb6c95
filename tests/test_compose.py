"""docker-compose.yml and the Dockerfile, checked without a Docker engine: the Compose spec's own
JSON Schema (vendored by check-jsonschema) validates the file, then assertions pin what the
deployment promises (GPU reservation, no database or broker port published, AOF + password, ...)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker-compose.yml"


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def _validate(path: Path) -> subprocess.CompletedProcess[str]:
    # A test dependency (pyproject's test extras): missing it is a broken install, not a skip.
    exe = str(Path(sys.executable).with_name("check-jsonschema"))
    return subprocess.run(
        [exe, "--builtin-schema", "vendor.compose-spec", str(path)], capture_output=True, text=True, timeout=60
    )


def test_compose_file_is_valid_compose_spec() -> None:
    result = _validate(COMPOSE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_validator_rejects_a_broken_file(tmp_path: Path) -> None:
    bad = yaml.safe_load(COMPOSE.read_text())
    bad["services"]["worker"]["shm_size"] = ["16gb"]  # not a string or number
    bad["services"]["api"]["healthchek"] = {}  # misspelt key
    path = tmp_path / "compose.yml"
    path.write_text(yaml.safe_dump(bad))
    assert _validate(path).returncode != 0


def test_services(compose: dict) -> None:
    assert {"api", "worker", "redis", "postgres", "migrate"} <= set(compose["services"])


def test_no_database_or_broker_port_published(compose: dict) -> None:
    s = compose["services"]
    for name in ("redis", "postgres", "worker", "migrate"):
        assert "ports" not in s[name], f"{name} must not publish a port"
    assert [p.split(":")[-1] for p in s["api"]["ports"]] == ["8000"]


def test_worker_gets_gpus_and_shm(compose: dict) -> None:
    w = compose["services"]["worker"]
    devices = w["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
    assert w["shm_size"].endswith("gb")
    assert "worker" in w["command"]
    assert w["stop_grace_period"]  # time for ranks to checkpoint on a deploy


def test_redis_persists_and_needs_a_password(compose: dict) -> None:
    r = compose["services"]["redis"]
    cmd = " ".join(r["command"])
    assert "--appendonly yes" in cmd and "--requirepass" in cmd
    assert any(v.endswith(":/data") for v in r["volumes"])
    env = compose["services"]["api"]["environment"]
    assert env["RANKZERO_BROKER_URL"].startswith("redis://:${REDIS_PASSWORD")


def test_postgres_has_a_volume(compose: dict) -> None:
    p = compose["services"]["postgres"]
    assert any(v.endswith(":/var/lib/postgresql/data") for v in p["volumes"])
    assert "pgdata" in compose["volumes"]


def test_shared_runs_volume_and_migrations_first(compose: dict) -> None:
    s = compose["services"]
    for name in ("api", "worker"):
        assert "runs:/runs" in s[name]["volumes"]
        assert s[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        assert s[name]["environment"]["RANKZERO_RUNS_DIR"] == "/runs"
    assert "upgrade" in " ".join(s["migrate"]["command"])


def test_worker_security_files_exist(compose: dict) -> None:
    """The seccomp profile the worker names is read by Compose from the project folder (not the image)."""
    import json

    opts = compose["services"]["worker"]["security_opt"]
    profiles = [o.split("=", 1)[1] for o in opts if o.startswith("seccomp=")]
    assert profiles == ["./deploy/seccomp/worker.json"]
    assert json.loads((ROOT / profiles[0]).read_text())["defaultAction"] == "SCMP_ACT_ERRNO"
    assert "privileged" not in compose["services"]["worker"] and "cap_add" not in compose["services"]["worker"]


def test_healthchecks(compose: dict) -> None:
    for name in ("api", "worker", "redis", "postgres"):
        assert compose["services"][name]["healthcheck"]["test"], name


def test_dockerfile() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert "HEALTHCHECK" in text
    assert "\nUSER rankzero" in text and "useradd" in text
    assert "pip install ." in text  # torch from the registry through the project's pins
    ignore = (ROOT / ".dockerignore").read_text().split()
    assert {".git", ".venv", "runs"} <= set(ignore)


def test_dockerfile_ships_every_package_and_front_end_file_make_does() -> None:
    """The image is built from what `make` installs: every package pyproject lists is copied in, and
    every front-end file the Makefile vendors from npm is vendored in the image too."""
    import re

    import tomllib

    text = (ROOT / "Dockerfile").read_text()
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    for pattern in packages["include"]:
        name = pattern.rstrip("*")
        assert f"COPY {name} ./{name}" in text, name
        assert f"{name}/__init__.py" in text, name  # the dependency layer's placeholder package
    vendored = set(re.findall(r"node_modules/(\S+\.(?:js|css))", (ROOT / "Makefile").read_text()))
    assert vendored and vendored <= set(re.findall(r"node_modules/(\S+\.(?:js|css))", text)), vendored
    compose = yaml.safe_load(COMPOSE.read_text())
    assert "datasets:/datasets" in compose["x-rankzero"]["volumes"]
